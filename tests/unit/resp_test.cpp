#include <catch2/catch.hpp>

#include <algorithm>

#include "redis/resp.hpp"

using limitcounter::detail::append_resp_command;

TEST_CASE("commands encode as RESP arrays of bulk strings", "[resp]") {
  std::string out;
  append_resp_command(out, {"HGET", "k", ""});
  CHECK(out == "*3\r\n$4\r\nHGET\r\n$1\r\nk\r\n$0\r\n\r\n");
  out.clear();
  const std::string binary("a\r\n\0b", 5);
  append_resp_command(out, {"SET", binary});
  static const char expected[] = "*2\r\n$3\r\nSET\r\n$5\r\na\r\n\0b\r\n";
  CHECK(out == std::string(expected, sizeof(expected) - 1));
  append_resp_command(out, {"PING"}); // appends: a pipeline is several in a row
  CHECK(out.substr(sizeof(expected) - 1) == "*1\r\n$4\r\nPING\r\n");
  const std::string big(100000, 'x');
  out.clear();
  append_resp_command(out, {big});
  CHECK(out.substr(0, 14) == "*1\r\n$100000\r\nx");
  CHECK(out.size() == 4 + 9 + 100000 + 2);
}

TEST_CASE("a script call (EVALSHA or FCALL) encodes as its argv would", "[resp]") {
  using limitcounter::detail::append_script_call;
  const std::string sha1(40, 'a');
  const std::vector<std::string> keys{"k1", std::string(300, 'k')};
  const std::vector<std::string> args{"", "1", std::string("a\r\n\0b", 5)};
  std::string expected = "prefix";
  append_resp_command(expected,
                      {"EVALSHA", sha1, "2", keys[0], keys[1], args[0], args[1], args[2]});
  std::string out = "prefix";
  append_script_call(out, "EVALSHA", sha1, keys, args);
  CHECK(out == expected);
  out.clear();
  append_script_call(out, "EVALSHA", sha1, {}, {});
  CHECK(out == "*3\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha1 + "\r\n$1\r\n0\r\n");
  out.clear();
  append_script_call(out, "FCALL", "limitcounter_limit_0123", {"k"}, {"x"});
  CHECK(out ==
        "*5\r\n$5\r\nFCALL\r\n$23\r\nlimitcounter_limit_0123\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nx\r\n");
}

namespace {

using limitcounter::Reply;
using limitcounter::detail::RespReader;

// Feeds `bytes` in pieces of `piece` bytes; the replies that came out, and the last status.
std::vector<Reply> read_all(const std::string& bytes, std::size_t piece,
                            RespReader::Status* last = nullptr) {
  RespReader reader;
  std::vector<Reply> replies;
  RespReader::Status status = RespReader::Status::more;
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    const std::string part = bytes.substr(at, piece);
    reader.feed(part.data(), part.size());
    Reply reply;
    while ((status = reader.next(reply)) == RespReader::Status::reply) {
      replies.push_back(std::move(reply));
    }
    if (status == RespReader::Status::bad) {
      break;
    }
  }
  if (last != nullptr) {
    *last = status;
  }
  return replies;
}

} // namespace

TEST_CASE("replies parse into Reply values, whatever pieces the bytes come in", "[resp]") {
  const std::string binary("a\r\n\0b", 5);
  const std::string bytes = "+OK\r\n-ERR bad\r\n:-42\r\n$5\r\n" + binary +
                            "\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n"
                            "*3\r\n:1\r\n*2\r\n$3\r\nabc\r\n+x\r\n$2\r\n\r\r\r\n";
  for (const std::size_t piece : {bytes.size(), std::size_t{1}, std::size_t{2}, std::size_t{7}}) {
    CAPTURE(piece);
    RespReader::Status last{};
    const auto replies = read_all(bytes, piece, &last);
    CHECK(last == RespReader::Status::more); // everything taken, waiting for the next reply
    REQUIRE(replies.size() == 9);
    CHECK(replies[0].type() == Reply::Type::status);
    CHECK(replies[0].as_string() == "OK");
    CHECK(replies[1].is_error());
    CHECK(replies[1].as_string() == "ERR bad");
    CHECK(replies[2].as_integer() == -42);
    CHECK(replies[3].type() == Reply::Type::string);
    CHECK(replies[3].as_string() == binary);
    CHECK(replies[4].as_string().empty());
    CHECK(replies[5].is_nil());
    CHECK(replies[6].is_nil());
    CHECK(replies[7].as_array().empty());
    REQUIRE(replies[8].as_array().size() == 3);
    CHECK(replies[8].at(0).as_integer() == 1);
    CHECK(replies[8].at(1).at(0).as_string() == "abc");
    CHECK(replies[8].at(1).at(1).type() == Reply::Type::status);
    CHECK(replies[8].at(2).as_string() == "\r\r");
  }
}

TEST_CASE("bytes that are not RESP2 are refused, naming what is wrong", "[resp]") {
  // All at once, then byte by byte (scanned as the bytes arrive): the same verdict.
  const auto problem = [](const std::string& bytes) {
    std::string verdicts[2];
    for (const std::size_t piece : {bytes.size(), std::size_t{1}}) {
      RespReader reader;
      Reply reply;
      RespReader::Status status = RespReader::Status::more;
      for (std::size_t at = 0; at < bytes.size() && status == RespReader::Status::more;
           at += piece) {
        reader.feed(bytes.data() + at, std::min(piece, bytes.size() - at));
        status = reader.next(reply);
      }
      CHECK(reader.next(reply) == status); // a reader that saw bad bytes stays refused
      verdicts[piece == 1] =
          status == RespReader::Status::bad ? std::string(reader.problem()) : "accepted";
    }
    CHECK(verdicts[0] == verdicts[1]);
    return verdicts[0];
  };
  CHECK(problem("?x\r\n") == "an unknown reply type");
  CHECK(problem("\r\n") == "an empty line");
  CHECK(problem(":12a\r\n") == "a bad integer");
  CHECK(problem(":\r\n") == "a bad integer");
  CHECK(problem("$-2\r\n") == "a bad bulk string length");
  CHECK(problem("$3\r\nabcd\r\n") == "a bulk string longer than its length");
  CHECK(problem("*x\r\n") == "a bad array length");
  std::string deep;
  for (int i = 0; i < 40; ++i) {
    deep += "*1\r\n";
  }
  CHECK(problem(deep + ":1\r\n") == "arrays nested too deep");
  CHECK(problem("*2\r\n:1\r\n") == "accepted"); // not complete yet: waits for more
}

TEST_CASE("a large reply over many reads comes out whole, the bytes after it kept", "[resp]") {
  std::string bytes = "*200000\r\n";
  for (int i = 0; i < 200000; ++i) {
    bytes += "$1\r\nx\r\n";
  }
  bytes += ":7\r\n";
  const auto replies = read_all(bytes, 16 * 1024);
  REQUIRE(replies.size() == 2);
  CHECK(replies[0].as_array().size() == 200000);
  CHECK(replies[0].at(199999).as_string() == "x");
  CHECK(replies[1].as_integer() == 7);
}

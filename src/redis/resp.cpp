#include "redis/resp.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace limitcounter::detail {
namespace {

// The longest header: a kind byte, 20 digits, CRLF.
constexpr std::size_t max_header = 1 + 20 + 2;

char* put_header(char* at, char kind, std::size_t number) {
  *at++ = kind;
  at = std::to_chars(at, at + 20, number).ptr;
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

// Arrays nested deeper than this are refused (hiredis 0.14 refused more than 7 levels); the
// library's replies nest two at most.
constexpr std::size_t max_depth = 32;

// The position of the first CRLF in [from, size) of `data`, or npos if there is none yet.
// (Header lines are a few bytes: a loop costs less than memchr's setup.)
std::size_t line_end(const char* data, std::size_t from, std::size_t size) {
  for (std::size_t at = from; at + 1 < size; ++at) {
    if (data[at] == '\r' && data[at + 1] == '\n') {
      return at;
    }
  }
  return std::string_view::npos;
}

// A whole header line's text as a base-10 int64 (an optional '-', then 1 to 19 digits).
bool parse_integer(const char* first, const char* last, std::int64_t& value) {
  const bool negative = first != last && *first == '-';
  first += negative ? 1 : 0;
  if (first == last || last - first > 19) {
    return false;
  }
  std::uint64_t magnitude = 0; // 19 digits never overflow 64 bits
  for (; first != last; ++first) {
    const auto digit = static_cast<unsigned>(*first - '0');
    if (digit > 9) {
      return false;
    }
    magnitude = magnitude * 10 + digit;
  }
  constexpr std::uint64_t most = std::uint64_t{1} << 63U;
  if (magnitude > (negative ? most : most - 1)) {
    return false;
  }
  value =
      negative ? static_cast<std::int64_t>(0 - magnitude) : static_cast<std::int64_t>(magnitude);
  return true;
}

using Status = RespReader::Status;

// One element's header line at `at` (and a bulk string's bytes), checked.
struct Element {
  char type = 0;
  const char* text = nullptr; // the header line after the type byte
  std::size_t text_size = 0;
  std::int64_t number = 0; // an integer, a bulk string's or an array's length (-1: nil)
  std::size_t next = 0;    // where the element after it begins
};

Status read_element(const char* data, std::size_t at, std::size_t size, Element& element,
                    const char*& problem) {
  const std::size_t end = line_end(data, at, size);
  if (end == std::string_view::npos) {
    return Status::more;
  }
  if (end == at) {
    problem = "an empty line";
    return Status::bad;
  }
  element.type = data[at];
  element.text = data + at + 1;
  element.text_size = end - at - 1;
  element.next = end + 2;
  switch (element.type) {
  case '+':
  case '-': return Status::reply;
  case ':':
    if (!parse_integer(element.text, data + end, element.number)) {
      problem = "a bad integer";
      return Status::bad;
    }
    return Status::reply;
  case '$':
    if (!parse_integer(element.text, data + end, element.number) || element.number < -1) {
      problem = "a bad bulk string length";
      return Status::bad;
    }
    if (element.number >= 0) {
      if (static_cast<std::uint64_t>(element.number) + 2 > size - element.next) {
        return Status::more;
      }
      const std::size_t after = element.next + static_cast<std::size_t>(element.number);
      if (data[after] != '\r' || data[after + 1] != '\n') {
        problem = "a bulk string longer than its length";
        return Status::bad;
      }
      element.next = after + 2;
    }
    return Status::reply;
  case '*':
    if (!parse_integer(element.text, data + end, element.number) || element.number < -1) {
      problem = "a bad array length";
      return Status::bad;
    }
    return Status::reply;
  default: problem = "an unknown reply type"; return Status::bad;
  }
}

// The reply at `at`, and `at` moved past it, when `status` comes back Status::reply; else its
// bytes have not all arrived (Status::more) or are not RESP2. Returned by value, so that each
// reply is built in its place (an array's element in the array).
Reply build(const char* data, std::size_t& at, std::size_t size, std::size_t depth, Status& status,
            const char*& problem) {
  Element element;
  status = read_element(data, at, size, element, problem);
  if (status != Status::reply) {
    return Reply();
  }
  const std::size_t begin = at;
  at = element.next;
  switch (element.type) {
  case '+': return Reply::status(std::string(element.text, element.text_size));
  case '-': return Reply::error(std::string(element.text, element.text_size));
  case ':': return Reply::integer(element.number);
  case '$':
    if (element.number < 0) {
      return Reply();
    }
    return Reply::string(std::string(element.text + element.text_size + 2,
                                     static_cast<std::size_t>(element.number)));
  default: break;
  }
  if (element.number < 0) {
    return Reply();
  }
  if (element.number > 0 && depth >= max_depth) {
    problem = "arrays nested too deep";
    status = Status::bad;
    return Reply();
  }
  // Each element takes 3 bytes at least: a count past what arrived is reserved no further.
  const auto count = static_cast<std::uint64_t>(element.number);
  std::vector<Reply> elements;
  elements.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, (size - begin) / 3)));
  for (std::uint64_t i = 0; i < count; ++i) {
    elements.push_back(build(data, at, size, depth + 1, status, problem));
    if (status != Status::reply) {
      return Reply();
    }
  }
  return Reply::array(std::move(elements));
}

// Room for the RESP encoding of `args` after their count's header.
// The length of `number` in decimal.
std::size_t digits(std::size_t number) {
  std::size_t count = 1;
  while (number >= 10) {
    number /= 10;
    ++count;
  }
  return count;
}

// The exact bytes of `args` as bulk strings: the buffer is sized (and so zero-filled) once, for
// no more than is written.
template <typename Args> std::size_t room_for(const Args& args) {
  std::size_t room = 0;
  for (const auto& arg : args) {
    room += 3 + digits(arg.size()) + arg.size() + 2;
  }
  return room;
}

// Writes each of `args` as a bulk string at `at`; returns where it stopped.
template <typename Args> char* put_bulks(char* at, const Args& args) {
  for (const auto& arg : args) {
    at = put_header(at, '$', arg.size());
    if (!arg.empty()) {
      std::memcpy(at, arg.data(), arg.size());
    }
    at += arg.size();
    *at++ = '\r';
    *at++ = '\n';
  }
  return at;
}

} // namespace

// Written in place into room for the longest headers, then cut to size: one resize, no append
// per piece.
void append_resp_command(std::string& out, const std::vector<std::string_view>& argv) {
  const std::size_t start = out.size();
  out.resize(start + max_header + room_for(argv));
  char* const begin = &out[0];
  char* at = put_header(begin + start, '*', argv.size());
  at = put_bulks(at, argv);
  out.resize(static_cast<std::size_t>(at - begin));
}

void append_script_call(std::string& out, std::string_view command, std::string_view script,
                        const std::vector<std::string>& keys,
                        const std::vector<std::string>& args) {
  char numkeys[24];
  const std::string_view head[] = {
      command, script,
      std::string_view(numkeys,
                       static_cast<std::size_t>(
                           std::to_chars(numkeys, numkeys + 24, keys.size()).ptr - numkeys))};
  const std::size_t start = out.size();
  out.resize(start + max_header + room_for(head) + room_for(keys) + room_for(args));
  char* const begin = &out[0];
  char* at = put_header(begin + start, '*', 3 + keys.size() + args.size());
  at = put_bulks(at, head);
  at = put_bulks(at, keys);
  at = put_bulks(at, args);
  out.resize(static_cast<std::size_t>(at - begin));
}

RespReader::Status RespReader::fail(const char* problem) {
  problem_ = problem;
  return Status::bad;
}

RespReader::Status RespReader::next(Reply& out) {
  if (problem_ != nullptr) {
    return Status::bad;
  }
  const char* data = buffer_.data();
  const std::size_t size = buffer_.size();
  if (open_.empty()) {
    if (start_ == size) {
      return Status::more;
    }
    // Nearly always the whole reply came in one read: built in one pass.
    std::size_t at = start_;
    Status status = Status::more;
    Reply reply = build(data, at, size, 0, status, problem_);
    if (status == Status::reply) {
      out = std::move(reply);
      return took(at);
    }
    if (status == Status::bad) {
      return Status::bad;
    }
    scanned_ = start_; // part of it came: from now on scanned as it arrives
    open_.push_back(1);
  }
  // Checks one element at a time; what was checked stays checked when more bytes are needed.
  while (!open_.empty()) {
    Element element;
    const Status status = read_element(data, scanned_, size, element, problem_);
    if (status != Status::reply) {
      return status;
    }
    scanned_ = element.next;
    --open_.back();
    if (element.type == '*' && element.number > 0) {
      if (open_.size() > max_depth) {
        return fail("arrays nested too deep");
      }
      open_.push_back(element.number);
    }
    while (!open_.empty() && open_.back() == 0) {
      open_.pop_back();
    }
  }
  std::size_t at = start_;
  Status complete = Status::more;
  out = build(data, at, scanned_, 0, complete, problem_);
  return took(at);
}

RespReader::Status RespReader::took(std::size_t end) {
  start_ = end;
  if (start_ == buffer_.size()) {
    buffer_.clear();
    start_ = 0;
  } else if (start_ >= buffer_.size() / 2) {
    buffer_.erase(0, start_); // what is left is the start of the next reply
    start_ = 0;
  }
  return Status::reply;
}

} // namespace limitcounter::detail

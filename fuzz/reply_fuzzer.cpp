// Reply decoding: a reply of any shape given to the codecs either decodes or throws
// limitcounter::Error; nothing crashes, nothing else escapes.
#include <cstdlib>

#include <limitcounter/error.hpp>

#include "limit_counter/counter_codec.hpp"
#include "limit_counter/limit_codec.hpp"
#include "fuzz_input.hpp"

namespace {

limitcounter::Reply make_reply(fuzz::Input& input, int depth) {
  using limitcounter::Reply;
  switch (input.take_byte() % (depth > 2 ? 4 : 5)) {
  case 0: return Reply();
  case 1: return Reply::integer(input.take_int64());
  case 2: return Reply::string(input.take_string());
  case 3: return Reply::error(input.take_string());
  default: {
    std::vector<Reply> items(input.take_byte() % 40);
    for (auto& item : items) {
      item = make_reply(input, depth + 1);
    }
    return Reply::array(std::move(items));
  }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input input(data, size);
  const std::string text = input.take_string();
  const limitcounter::Reply reply = make_reply(input, 0);
  const auto must_not_escape = [](auto&& action) {
    try {
      action();
    } catch (const limitcounter::Error&) {
    }
  };
  must_not_escape([&] { limitcounter::detail::parse_counter_value(text); });
  must_not_escape([&] { limitcounter::detail::decode_counter_add(reply, 2, "fuzz"); });
  // a decide call with one counter and one rule, as build_decide makes it
  const std::vector<std::string> args{
      "consume", "fp", "1", "0", "0",  "0", "0", "1", "f\nday\n20261122\n0\n0\n1\nr\n1\n-1\n5",
      "f",       "0",  "1", "1", "-1", "5"};
  must_not_escape([&] { limitcounter::detail::decode_decision(reply, args, "fuzz", 1); });
  must_not_escape([&] { limitcounter::detail::decode_decision(reply, {}, "fuzz", 1); });
  must_not_escape([&] { (void)reply.debug_string(); });
  return 0;
}

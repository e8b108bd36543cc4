// Reply decoding: a reply of any shape given to the codecs either decodes or throws
// limitcounter::Error; nothing crashes, nothing else escapes.
#include <cstdlib>

#include <limitcounter/error.hpp>

#include "fuzz_input.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/decide_replies.hpp"
#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/counter_codec.hpp"

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
  // what a decide call with one counter, a window rule and a per-transaction rule reads its
  // reply with (as build_decide makes it), and one with nothing
  static const limitcounter::Rule window =
      limitcounter::Rule("r").where("f").per(limitcounter::Period::day).max_amount(5);
  static const limitcounter::Rule single = limitcounter::Rule("s").max_amount(5);
  limitcounter::detail::DecideShape shape;
  shape.counters.push_back({limitcounter::Period::day, "20261122", limitcounter::TimePoint{}});
  shape.rules = {{&single, 0}, {&window, 1}};
  must_not_escape([&] { limitcounter::detail::decode_decision(reply, shape, "fuzz", 1); });
  must_not_escape([&] { limitcounter::detail::decode_decision(reply, {}, "fuzz", 1); });
  must_not_escape([&] { limitcounter::detail::split_decide_replies(reply, 2); });
  must_not_escape([&] { limitcounter::detail::decode_denial(text, "fuzz", 1); });
  must_not_escape([&] { (void)reply.debug_string(); });
  return 0;
}

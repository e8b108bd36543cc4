// Key validation: whatever a caller passes, a part that is accepted contains no
// separator, brace, Unicode whitespace, control or invisible character, is valid UTF-8 and at
// most 64 bytes; a refused one throws limitcounter::Error naming it escaped, and nothing else
// escapes.
#include <cstdlib>

#include <limitcounter/dimension.hpp>
#include <limitcounter/keys.hpp>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input input(data, size);
  const std::string first = input.take_string();
  const std::string second = input.take_string();
  try {
    const limitcounter::Dimension dimension{first, second};
    for (const std::string& part : {first, second}) {
      if (part.empty() || part.size() > limitcounter::max_key_part_bytes) {
        std::abort();
      }
      for (std::size_t i = 0; i < part.size();) {
        const char c = part[i];
        const auto step = limitcounter::detail::decode_utf8(part, i);
        if (c == '+' || c == ':' || c == '{' || c == '}' || step.length == 0 ||
            limitcounter::detail::is_space_or_control(step.code_point) ||
            limitcounter::detail::is_invisible(step.code_point)) {
          std::abort();
        }
        i += step.length;
      }
    }
    if (dimension.parts() != std::vector<std::string>{first, second}) {
      std::abort(); // the field must split back into exactly its parts
    }
    const std::string key = limitcounter::CounterKeys().window("c", limitcounter::Period::day, "1");
    if (key.find('{') != key.rfind('{')) {
      std::abort();
    }
  } catch (const limitcounter::Error& e) {
    if (e.code() != limitcounter::errc::invalid_argument) {
      std::abort();
    }
    // The message names the value escaped: nothing in it acts on a terminal or hides.
    const std::string message = e.what();
    if (limitcounter::detail::escape_text(message, limitcounter::detail::Escape::plain) !=
        message) {
      std::abort();
    }
  }
  return 0;
}

// Key validation: whatever a caller passes, a part that is accepted contains no
// separator, brace, whitespace or control byte, is valid UTF-8 and at most 64 bytes;
// a refused one throws limitcounter::Error naming it, and nothing else escapes.
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
      for (const char c : part) {
        const auto byte = static_cast<unsigned char>(c);
        if (c == '+' || c == ':' || c == '{' || c == '}' || c == ' ' || byte < 0x20 ||
            byte == 0x7f) {
          std::abort();
        }
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
  }
  return 0;
}

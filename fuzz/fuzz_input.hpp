#pragma once
// Splits a fuzzer's bytes into pieces: each piece is a length byte and that many bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fuzz {

class Input {
public:
  Input(const std::uint8_t* data, std::size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}

  bool empty() const { return rest_.empty(); }

  std::string take_string() {
    if (rest_.empty()) {
      return {};
    }
    const std::size_t length =
        std::min<std::size_t>(static_cast<unsigned char>(rest_[0]), rest_.size() - 1);
    std::string piece(rest_.substr(1, length));
    rest_.remove_prefix(1 + length);
    return piece;
  }

  std::uint8_t take_byte() {
    if (rest_.empty()) {
      return 0;
    }
    const auto byte = static_cast<std::uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return byte;
  }

  std::int64_t take_int64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) {
      value = (value << 8U) | take_byte();
    }
    return static_cast<std::int64_t>(value);
  }

private:
  std::string_view rest_;
};

} // namespace fuzz

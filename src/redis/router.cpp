#include "redis/router.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter::detail {

Endpoint parse_seed(std::string_view seed, std::string_view what) {
  const auto bad = [&]() {
    return Error(errc::invalid_argument, std::string(what) + " " + quote_for_message(seed) +
                                             " is not host:port (port 1 to 65535; an IPv6 "
                                             "host in brackets, as in [::1]:7000)");
  };
  const auto colon = seed.rfind(':');
  if (colon == std::string_view::npos) {
    throw bad();
  }
  std::string_view host = seed.substr(0, colon);
  const std::string_view port_text = seed.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    throw bad(); // an IPv6 address without brackets: which ':' starts the port?
  }
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  const auto parsed = std::from_chars(port_text.data(), end, port);
  if (host.empty() || port_text.empty() || parsed.ec != std::errc{} || parsed.ptr != end ||
      port < 1 || port > 65535) {
    throw bad();
  }
  return {std::string(host), port};
}

std::size_t SlotMap::node_index(const Endpoint& endpoint) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == endpoint) {
      return i;
    }
  }
  nodes_.push_back(endpoint);
  return nodes_.size() - 1;
}

namespace {

bool same_word(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) ==
                  std::toupper(static_cast<unsigned char>(y));
         });
}

template <std::size_t N>
bool is_one_of(std::string_view word, const std::array<std::string_view, N>& words) {
  return std::any_of(words.begin(), words.end(),
                     [&](std::string_view w) { return same_word(word, w); });
}

} // namespace

std::optional<std::string_view> routing_key(const std::vector<std::string>& argv) {
  static constexpr std::array<std::string_view, 25> keyless{
      "PING",     "INFO",    "TIME",    "ECHO",     "DBSIZE",    "SCRIPT",   "CLUSTER",
      "CONFIG",   "CLIENT",  "COMMAND", "FUNCTION", "ACL",       "DEBUG",    "ROLE",
      "FLUSHALL", "FLUSHDB", "KEYS",    "SCAN",     "RANDOMKEY", "LASTSAVE", "WAIT",
      "SLOWLOG",  "LATENCY", "HELLO",   "READONLY"};
  static constexpr std::array<std::string_view, 6> scripts{"EVAL",       "EVALSHA", "EVAL_RO",
                                                           "EVALSHA_RO", "FCALL",   "FCALL_RO"};
  static constexpr std::array<std::string_view, 4> subcommand_key{"MEMORY", "OBJECT", "XGROUP",
                                                                  "XINFO"};
  if (argv.size() < 2 || is_one_of(argv[0], keyless)) {
    return std::nullopt;
  }
  const std::string_view name = argv[0];
  if (same_word(name, "XREAD") || same_word(name, "XREADGROUP")) {
    const auto streams = std::find_if(argv.begin() + 1, argv.end(),
                                      [](const std::string& a) { return same_word(a, "STREAMS"); });
    if (streams == argv.end() || streams + 1 == argv.end()) {
      return std::nullopt; // malformed: the server's error tells
    }
    return std::string_view(*(streams + 1));
  }
  if (is_one_of(name, scripts)) {
    std::int64_t numkeys = 0;
    const std::string& text = argv.size() > 2 ? argv[2] : argv[1];
    const auto parsed = std::from_chars(text.data(), text.data() + text.size(), numkeys);
    if (argv.size() < 4 || parsed.ec != std::errc{} || numkeys <= 0) {
      return std::nullopt;
    }
    return std::string_view(argv[3]);
  }
  if (is_one_of(name, subcommand_key)) {
    if (argv.size() < 3) {
      return std::nullopt;
    }
    return std::string_view(argv[2]);
  }
  return std::string_view(argv[1]);
}

std::optional<std::size_t> SlotMap::owner(int slot) const {
  const int node = owners_[slot < 0 ? 0 : static_cast<std::size_t>(slot)];
  if (node < 0) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(node);
}

std::vector<int> SlotMap::one_slot_per_node() const {
  std::vector<bool> met(nodes_.size(), false);
  std::vector<int> slots;
  for (int slot = 0; slot < static_cast<int>(cluster_slots); ++slot) {
    const int node = owners_[static_cast<std::size_t>(slot)];
    if (node >= 0 && !met[static_cast<std::size_t>(node)]) {
      met[static_cast<std::size_t>(node)] = true;
      slots.push_back(slot);
    }
  }
  return slots;
}

bool SlotMap::assign(const std::vector<SlotRange>& ranges, Clock::time_point now) {
  if (ranges.empty()) {
    return false;
  }
  for (const auto& range : ranges) {
    const int node = static_cast<int>(node_index({range.host, range.port}));
    for (unsigned s = range.first; s <= range.last; ++s) {
      owners_[s] = node;
    }
  }
  fresh_until_ = now + refresh_every;
  return true;
}

std::size_t SlotMap::moved(const Redirect& redirect) {
  const std::size_t node = node_index({redirect.host, redirect.port});
  owners_[redirect.slot] = static_cast<int>(node);
  fresh_until_ = {};
  return node;
}

} // namespace limitcounter::detail

#include <limitcounter/error.hpp>

namespace limitcounter {
namespace {

class Category final : public std::error_category {
public:
  const char* name() const noexcept override { return "limitcounter"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
    case errc::invalid_argument: return "invalid argument";
    case errc::unknown_time_zone: return "unknown time zone";
    case errc::precision_overflow: return "amount or total would pass 2^53";
    case errc::window_closed: return "window already closed";
    case errc::conflict: return "conflicting use of an id";
    case errc::not_found: return "unknown id";
    case errc::cross_slot: return "keys of several cluster slots in one call";
    case errc::connect_failed: return "could not connect to Redis";
    case errc::pool_exhausted: return "no free Redis connection";
    case errc::io_error: return "Redis connection broke";
    case errc::timeout: return "Redis did not answer in time";
    case errc::server_error: return "Redis answered with an error";
    case errc::protocol_error: return "unexpected reply from Redis";
    case errc::cluster_down: return "Redis Cluster could not route the command";
    case errc::circuit_open: return "Redis circuit breaker is open";
    }
    return "unknown limitcounter error";
  }
};

} // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

} // namespace limitcounter

#include <limitcounter/red_packet_split.hpp>

#include <algorithm>
#include <random>
#include <string>

#include <limitcounter/error.hpp>

#include "shared/amount.hpp"

namespace limitcounter {
namespace {

[[noreturn]] void refuse(const std::string& message) {
  throw Error(errc::invalid_argument, "split: " + message);
}

// others × max, or `left` if that is more: others × max wraps past INT64_MAX for huge
// totals (the default max is the total), and anything above `left` bounds nothing.
std::int64_t at_most(std::int64_t others, std::int64_t max, std::int64_t left) {
  return max > left / others ? left : others * max;
}

// Double-mean over [min, max]: position i draws from [low, high] where high is twice the
// mean of what is left, and both ends are pulled in so the rest stays feasible.
void draw(std::int64_t total, std::int64_t count, std::int64_t min, std::int64_t max,
          std::mt19937_64& random, std::vector<std::int64_t>& out) {
  std::int64_t left = total;
  for (std::int64_t remaining = count; remaining > 1; --remaining) {
    const std::int64_t others = remaining - 1;
    std::int64_t high = std::min(2 * left / remaining, max);
    std::int64_t low = min;
    high = std::min(high, left - others * min); // the others need at least min each (<= left)
    low = std::max(low, left - at_most(others, max, left)); // and can take at most max each
    high = std::max(high, low);
    const std::int64_t amount = std::uniform_int_distribution<std::int64_t>(low, high)(random);
    out.push_back(amount);
    left -= amount;
  }
  out.push_back(left);
}

} // namespace

std::vector<std::int64_t> split(std::int64_t total, std::int64_t count,
                                const SplitOptions& options) {
  detail::check_quantity("split total", total, true);
  if (count < 1 || count > max_red_packet_amounts) {
    refuse("count " + std::to_string(count) + " must be from 1 to " +
           std::to_string(max_red_packet_amounts));
  }
  const std::int64_t min = options.min_amount;
  if (min < 1) {
    refuse("min_amount " + std::to_string(min) + " must be at least 1");
  }
  if (total / count < min) {
    refuse("total " + std::to_string(total) + " cannot give " + std::to_string(count) +
           " packets of at least " + std::to_string(min));
  }
  const std::int64_t max = options.max_amount.value_or(total);
  if (options.max_amount &&
      (max < min || total / count > max || (total / count == max && total % count != 0))) {
    refuse("max_amount " + std::to_string(max) + " is too small for " + std::to_string(count) +
           " packets of total " + std::to_string(total) + " (min " + std::to_string(min) + ")");
  }
  if (options.guaranteed_percent < 0 || options.guaranteed_percent > 100) {
    refuse("guaranteed_percent " + std::to_string(options.guaranteed_percent) +
           " is not within 0..100");
  }
  std::mt19937_64 random(options.seed ? *options.seed
                                      : std::random_device{}() * 0x9E3779B97F4A7C15ULL ^
                                            std::random_device{}());
  // Everyone first gets `base` (at least min, at most max); the rest is drawn on top.
  const std::int64_t base = std::clamp(total / count * options.guaranteed_percent / 100, min, max);
  std::vector<std::int64_t> amounts;
  amounts.reserve(static_cast<std::size_t>(count));
  draw(total - base * count, count, 0, max - base, random, amounts);
  for (auto& amount : amounts) {
    amount += base;
  }
  return amounts;
}

} // namespace limitcounter

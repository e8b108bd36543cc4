// LimitCounter's period counters (job 1 of docs/ARCHITECTURE.md): add, add_many, usage.
#include "limit_counter/limit_counter_impl.hpp"

#include <utility>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/counter_codec.hpp"
#include "limit_counter/listing.hpp"
#include "limit_counter/window_closed.hpp"
#include "shared/amount.hpp"
#include "shared/batch.hpp"

namespace limitcounter {

ScriptCall LimitCounter::Impl::prepare_add(const AddRequest& request,
                                           std::vector<WindowUsage>& windows, TimePoint now) const {
  CounterKeys::validate_counter_name(request.counter);
  detail::check_quantity("count", request.count);
  detail::check_quantity("amount", request.amount);
  if (request.periods.empty()) {
    throw Error(errc::invalid_argument, "add needs at least one period");
  }
  ScriptCall call{&scripts::counter_add, {}, {}};
  call.keys.reserve(request.periods.size());
  call.args.reserve(3 + request.periods.size());
  call.args = {request.dimension.field(), std::to_string(request.count),
               std::to_string(request.amount)};
  windows.clear();
  windows.reserve(request.periods.size());
  for (const Period period : request.periods) {
    for (const auto& seen : windows) {
      if (seen.period == period) {
        throw Error(errc::invalid_argument,
                    "period " + std::string(to_string(period)) + " is given twice");
      }
    }
    Window window = calendar_.window(period, request.at);
    const TimePoint expire_at = window.end + options_.window_grace;
    detail::check_window_open(request.counter, period, window, options_.window_grace, now);
    call.keys.push_back(
        keys_.window(keys_.tag(request.counter, request.dimension.field()), period, window.id));
    call.args.push_back(std::to_string(detail::unix_millis(expire_at)));
    windows.push_back({period, std::move(window), {}});
  }
  return call;
}

namespace {

void fill_totals(const Reply& reply, const AddRequest& request, std::vector<WindowUsage>& windows) {
  const auto totals = detail::decode_counter_add(reply, windows.size(),
                                                 request.counter + " " + request.dimension.field());
  for (std::size_t i = 0; i < totals.size(); ++i) {
    windows[i].usage = totals[i];
  }
}

} // namespace

std::vector<WindowUsage> LimitCounter::Impl::add(std::string_view counter,
                                                 const Dimension& dimension,
                                                 const std::vector<Period>& periods,
                                                 std::int64_t count, std::int64_t amount,
                                                 TimePoint at) {
  const AddRequest request{std::string(counter), dimension, periods, count, amount, at};
  std::vector<WindowUsage> windows;
  const ScriptCall call = prepare_add(request, windows, Clock::now());
  fill_totals(redis_.eval(*call.script, call.keys, call.args), request, windows);
  return windows;
}

std::vector<BatchResult<std::vector<WindowUsage>>>
LimitCounter::Impl::add_many(const std::vector<AddRequest>& requests) {
  const TimePoint now = Clock::now();
  std::vector<std::vector<WindowUsage>> windows(requests.size());
  std::vector<ScriptCall> calls;
  calls.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    calls.push_back(prepare_add(requests[i], windows[i], now));
  }
  return detail::run_batch<std::vector<WindowUsage>>(redis_, calls,
                                                     [&](std::size_t i, const Reply& reply) {
                                                       fill_totals(reply, requests[i], windows[i]);
                                                       return std::move(windows[i]);
                                                     });
}

Usage LimitCounter::Impl::usage(std::string_view counter, const Dimension& dimension, Period period,
                                TimePoint at) {
  CounterKeys::validate_counter_name(counter);
  const Window window = calendar_.window(period, at);
  return detail::read_usage(redis_,
                            keys_.window(keys_.tag(counter, dimension.field()), period, window.id),
                            dimension.field(), "HGET of counter " + std::string(counter));
}

} // namespace limitcounter

// LimitCounter: its Impl's construction (the options checked, the coalescer made) and the
// public calls, each forwarded to the Impl's method of the same name.
#include "limit_counter/limit_counter_impl.hpp"

#include <cstdio>
#include <random>
#include <utility>

#include "limit_counter/codec/decide_batch.hpp"
#include "shared/coalescer.hpp"

namespace limitcounter {
namespace {

// 64 random bits in hex: tells this process's local-fallback reports from every other's.
std::string new_node_id() {
  std::random_device device;
  const std::uint64_t bits = (std::uint64_t{device()} << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

} // namespace

LimitCounter::Impl::Impl(Redis redis, Calendar calendar, LimitCounterOptions options)
    : redis_(std::move(redis)), calendar_(std::move(calendar)), options_(std::move(options)),
      keys_(options_.key_prefix, options_.counter_buckets),
      local_(std::make_shared<detail::LocalLedger>(new_node_id())),
      exhausted_(detail::ExhaustedCache::make(options_.exhausted_cache)) {
  if (options_.window_grace.count() < 0) {
    throw Error(errc::invalid_argument, "window_grace " +
                                            std::to_string(options_.window_grace.count()) +
                                            "s must not be negative");
  }
  if (options_.cluster_hold_grace && options_.cluster_hold_grace->count() < 0) {
    throw Error(errc::invalid_argument, "cluster_hold_grace " +
                                            std::to_string(options_.cluster_hold_grace->count()) +
                                            "ms must not be negative");
  }
  // A record must outlive its reservation's hold, or a retry of the reserve would count again.
  if (options_.replay_horizon < options_.reservation_timeout ||
      options_.replay_horizon.count() <= 0) {
    throw Error(errc::invalid_argument,
                "replay_horizon " + std::to_string(options_.replay_horizon.count()) +
                    "ms must be positive and at least reservation_timeout (" +
                    std::to_string(options_.reservation_timeout.count()) + "ms)");
  }
  // One call in flight by default: concurrent consumes then share script calls, which is what
  // brings Redis's CPU per decision down to a record-less limiter's (docs/BENCHMARKS.md). On a
  // cluster a call is three steps on several masters: one in flight would run the masters one
  // operation at a time, so there consumes merge only when they would wait for a connection.
  const std::size_t in_flight =
      options_.consume_in_flight.value_or(redis_.is_cluster() ? redis_.options().pool_size : 1);
  if (in_flight > 0) {
    coalescer_ =
        std::make_shared<detail::Coalescer<DecideItem>>(in_flight, detail::max_decide_batch);
  }
}

LimitCounter::LimitCounter(Redis redis, Calendar calendar, LimitCounterOptions options)
    : impl_(std::make_unique<Impl>(std::move(redis), std::move(calendar), std::move(options))) {}

LimitCounter::~LimitCounter() = default;

const Calendar& LimitCounter::calendar() const noexcept { return impl_->calendar(); }

const CounterKeys& LimitCounter::keys() const noexcept { return impl_->keys(); }

std::vector<WindowUsage> LimitCounter::add(std::string_view counter, const Dimension& dimension,
                                           const std::vector<Period>& periods, std::int64_t count,
                                           std::int64_t amount, TimePoint at) {
  return impl_->add(counter, dimension, periods, count, amount, at);
}

std::vector<BatchResult<std::vector<WindowUsage>>>
LimitCounter::add_many(const std::vector<AddRequest>& requests) {
  return impl_->add_many(requests);
}

Usage LimitCounter::usage(std::string_view counter, const Dimension& dimension, Period period,
                          TimePoint at) {
  return impl_->usage(counter, dimension, period, at);
}

LimitCounter::DimensionPage LimitCounter::dimensions(std::string_view counter, Period period,
                                                     TimePoint at, std::string_view cursor,
                                                     std::int64_t count) {
  return impl_->dimensions(counter, period, at, cursor, count);
}

LimitCounter::CapUsage LimitCounter::cap_usage(std::string_view cap, std::string_view subject,
                                               TimePoint at) {
  return impl_->cap_usage(cap, subject, at);
}

CorrectionResult LimitCounter::adjust(std::string_view counter, const Dimension& dimension,
                                      Period period, const CounterCorrection& correction,
                                      TimePoint at) {
  return impl_->adjust(counter, dimension, period, correction, at);
}

std::optional<TransactionRecord>
LimitCounter::transaction_record(const std::string& transaction_id,
                                 const std::vector<std::string>& counters) {
  return impl_->transaction_record(transaction_id, counters);
}

void LimitCounter::set_rules(RuleSet rules) { impl_->set_rules(std::move(rules), 0); }

void LimitCounter::set_rules(RuleSet rules, std::uint64_t version) {
  impl_->set_rules(std::move(rules), version);
}

std::uint64_t LimitCounter::rule_set_version() const { return impl_->rule_set_version(); }

std::shared_ptr<const RuleSet> LimitCounter::rules() const { return impl_->rules(); }

Decision LimitCounter::consume(const Transaction& transaction) {
  return impl_->consume(transaction);
}

std::vector<BatchResult<Decision>>
LimitCounter::consume_many(const std::vector<Transaction>& transactions) {
  return impl_->consume_many(transactions);
}

Decision LimitCounter::reserve(const Transaction& transaction) {
  return impl_->reserve(transaction);
}

Decision LimitCounter::check(const Transaction& transaction) { return impl_->check(transaction); }

ConfirmResult LimitCounter::confirm(const std::string& transaction_id,
                                    std::optional<std::int64_t> final_amount) {
  return impl_->confirm(transaction_id, final_amount);
}

ConfirmResult LimitCounter::confirm(const Transaction& original,
                                    std::optional<std::int64_t> final_amount) {
  return impl_->confirm(original, final_amount);
}

CancelResult LimitCounter::cancel(const std::string& transaction_id) {
  return impl_->cancel(transaction_id);
}

CancelResult LimitCounter::cancel(const Transaction& original) { return impl_->cancel(original); }

RefundResult LimitCounter::refund(const std::string& transaction_id,
                                  std::optional<std::int64_t> amount,
                                  const std::string& refund_id) {
  return impl_->refund(transaction_id, amount, refund_id);
}

RefundResult LimitCounter::refund(const Transaction& original, std::optional<std::int64_t> amount,
                                  const std::string& refund_id) {
  return impl_->refund(original, amount, refund_id);
}

std::vector<InterruptedFanOut> LimitCounter::finish_interrupted(std::chrono::seconds older_than,
                                                                std::size_t max) {
  return impl_->finish_interrupted(older_than, max);
}

CapDecision LimitCounter::take_daily_cap(std::string_view cap, std::string_view subject,
                                         std::int64_t max_per_day, TimePoint at, std::int64_t n) {
  return impl_->take_daily_cap(cap, subject, max_per_day, at, n);
}

std::vector<BatchResult<CapDecision>>
LimitCounter::take_daily_cap_many(const std::vector<CapRequest>& requests) {
  return impl_->take_daily_cap_many(requests);
}

SlidingDecision LimitCounter::hit_sliding_window(std::string_view limiter, std::string_view subject,
                                                 std::int64_t max, std::chrono::milliseconds window,
                                                 TimePoint at) {
  return impl_->hit_sliding_window(limiter, subject, max, window, at);
}

std::vector<BatchResult<SlidingDecision>>
LimitCounter::hit_sliding_window_many(const std::vector<SlidingRequest>& requests) {
  return impl_->hit_sliding_window_many(requests);
}

} // namespace limitcounter

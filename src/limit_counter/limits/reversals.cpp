// LimitCounter's reversals: confirm, cancel and refund, by id or with the original
// transaction; their arguments, and what their replies mean.
#include "limit_counter/limit_counter_impl.hpp"

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/codec/reply_status.hpp"
#include "limit_counter/codec/reversals.hpp"
#include "limit_counter/rule_matching.hpp"
#include "limit_counter/share_plan.hpp"
#include "shared/amount.hpp"
#include "shared/observed.hpp"

namespace limitcounter {
namespace {

using detail::quoted_id;

[[noreturn]] void throw_unexpected(const Reply& reply, const std::string& what) {
  throw Error(errc::protocol_error, what + ": unexpected reply " + reply.debug_string(),
              Outcome::unknown);
}

// A reversal that brought an original transaction its record was not decided for.
void throw_if_mismatch(detail::ReplyStatus status, LimitOp op, const std::string& id) {
  if (status == detail::ReplyStatus::mismatch) {
    throw Error(errc::conflict,
                std::string(to_string(op)) + ": the transaction given is not the one " +
                    quoted_id(id) +
                    " recorded (another operation, amount or attributes); nothing changed",
                Outcome::failed);
  }
}

// The observer's status words (see `LimitObserver::on_transition`).
std::string_view status_word(const ConfirmResult& result) {
  return result.replayed ? "replayed" : "confirmed";
}

std::string_view status_word(const CancelResult& result) {
  if (result.replayed) {
    return "replayed";
  }
  switch (result.status) {
  case CancelResult::Status::cancelled: return "cancelled";
  case CancelResult::Status::expired: return "expired";
  case CancelResult::Status::recorded_unknown: return "recorded_unknown";
  }
  return "other";
}

std::string_view status_word(const RefundResult& result) {
  return result.replayed ? "replayed" : "refunded";
}

// `run()`, reported to `observer` (if any) as one `op` transition.
template <typename Run> auto observed(LimitObserver* observer, LimitOp op, Run&& run) {
  return detail::observed_call(
      observer, std::forward<Run>(run), [observer, op](const auto* result, auto latency) {
        observer->on_transition(op, result ? status_word(*result) : "error", latency);
      });
}

} // namespace
ConfirmResult LimitCounter::Impl::confirm(const std::string& transaction_id,
                                          std::optional<std::int64_t> final_amount) {
  return observed(options_.observer.get(), LimitOp::confirm,
                  [&] { return run_confirm(transaction_id, final_amount, nullptr); });
}

ConfirmResult LimitCounter::Impl::confirm(const Transaction& original,
                                          std::optional<std::int64_t> final_amount) {
  return observed(options_.observer.get(), LimitOp::confirm,
                  [&] { return run_confirm(original.id, final_amount, &original); });
}

std::vector<const Rule*>
LimitCounter::Impl::original_window_rules(LimitOp op, const Transaction& original,
                                          std::shared_ptr<const RulesInForce>& in_force) const {
  in_force = rules_to_decide(op, original.id);
  detail::validate_transaction(in_force->rules, original);
  detail::check_quantity(quoted_id(original.id) + " amount", original.amount);
  return detail::match_rules(in_force->rules, original).window;
}

std::string LimitCounter::Impl::append_original_args(LimitOp op, std::vector<std::string>& args,
                                                     const Transaction& original,
                                                     const std::vector<const Rule*>& window_rules,
                                                     const std::string& record_key) const {
  detail::DecideContext context;
  context.calendar = &calendar_;
  context.keys = &keys_;
  // A window of the original may have closed long ago: its key is gone, and the script leaves
  // it alone, so no window is refused here.
  context.refuse_closed_windows = false;
  // (as a decision's: the counter set's text, and so its name, has the windows' grace and the
  // horizon in its expiry)
  context.window_grace = options_.window_grace;
  context.replay_horizon = options_.replay_horizon;
  if (redis_.is_cluster()) {
    context.replay_horizon += detail::share_record_margin; // a share's record
  }
  context.now = Clock::now();
  context.record_key = &record_key;
  if (op == LimitOp::cancel) {
    args.emplace_back(); // (ARGV[4], the probe: none)
  }
  return detail::append_original(args, original, window_rules, context);
}

ConfirmResult LimitCounter::Impl::run_confirm(const std::string& transaction_id,
                                              std::optional<std::int64_t> final_amount,
                                              const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  if (final_amount) {
    detail::check_quantity(quoted_id(transaction_id) + " final amount", *final_amount);
  }
  std::vector<std::string> args{"confirm", final_amount ? std::to_string(*final_amount) : "-1",
                                std::to_string(detail::unix_millis(Clock::now()))};
  const Reply reply = freeing_transition(LimitOp::confirm, transaction_id, args, original);
  const detail::ReplyStatus status = detail::reply_status(reply);
  throw_if_mismatch(status, LimitOp::confirm, transaction_id);
  if (const auto result = detail::decode_confirm(reply)) {
    return *result;
  }
  if (status == detail::ReplyStatus::unknown) {
    throw Error(errc::not_found,
                "confirm: " + quoted_id(transaction_id) +
                    " is unknown: never reserved, or reserved before the replay horizon (" +
                    std::to_string(options_.replay_horizon.count()) + " ms)",
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::expired) {
    throw Error(errc::conflict,
                "confirm: the reservation of " + quoted_id(transaction_id) +
                    " expired and its hold was released",
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::bad_state) {
    throw Error(errc::conflict,
                "confirm: " + quoted_id(transaction_id) + " is " + reply.at(1).as_string() +
                    ", not reserved",
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::too_much) {
    throw Error(errc::invalid_argument,
                "confirm: final amount " + std::to_string(*final_amount) + " of " +
                    quoted_id(transaction_id) + " is more than the " + reply.at(1).as_string() +
                    " held",
                Outcome::failed);
  }
  throw_unexpected(reply, "confirm " + transaction_id);
}

CancelResult LimitCounter::Impl::cancel(const std::string& transaction_id) {
  return observed(options_.observer.get(), LimitOp::cancel,
                  [&] { return run_cancel(transaction_id, nullptr); });
}

CancelResult LimitCounter::Impl::cancel(const Transaction& original) {
  return observed(options_.observer.get(), LimitOp::cancel,
                  [&] { return run_cancel(original.id, &original); });
}

CancelResult LimitCounter::Impl::run_cancel(const std::string& transaction_id,
                                            const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  const auto now = Clock::now();
  // An unknown id is recorded in every record it could have, so a later reserve of any
  // share of it is refused.
  const std::vector<std::string> args{
      "cancel", std::to_string(detail::unix_millis(now)),
      std::to_string(detail::unix_millis(now + options_.replay_horizon))};
  const Reply reply = freeing_transition(LimitOp::cancel, transaction_id, args, original);
  const detail::ReplyStatus status = detail::reply_status(reply);
  throw_if_mismatch(status, LimitOp::cancel, transaction_id);
  if (const auto result = detail::decode_cancel(reply, transaction_id)) {
    return *result;
  }
  if (status == detail::ReplyStatus::bad_state) {
    const TransactionState state = detail::transaction_state(
        reply.at(1).as_string(), "the cancel of " + quoted_id(transaction_id));
    throw Error(errc::conflict,
                "cancel: " + quoted_id(transaction_id) + " is " + std::string(to_string(state)) +
                    (state == TransactionState::pending
                         ? " (its decision is under way: cancel it once it returns)"
                         : " (refund a consumed transaction instead)"),
                Outcome::failed);
  }
  throw_unexpected(reply, "cancel " + transaction_id);
}

RefundResult LimitCounter::Impl::refund(const std::string& transaction_id,
                                        std::optional<std::int64_t> amount,
                                        const std::string& refund_id) {
  return observed(options_.observer.get(), LimitOp::refund,
                  [&] { return run_refund(transaction_id, amount, refund_id, nullptr); });
}

RefundResult LimitCounter::Impl::refund(const Transaction& original,
                                        std::optional<std::int64_t> amount,
                                        const std::string& refund_id) {
  return observed(options_.observer.get(), LimitOp::refund,
                  [&] { return run_refund(original.id, amount, refund_id, &original); });
}

RefundResult LimitCounter::Impl::run_refund(const std::string& transaction_id,
                                            std::optional<std::int64_t> amount,
                                            const std::string& refund_id,
                                            const Transaction* original) {
  validate_key_part("transaction id", transaction_id, ":");
  if (amount) {
    detail::check_quantity(quoted_id(transaction_id) + " refund amount", *amount, true);
    if (refund_id.empty()) {
      throw Error(errc::invalid_argument,
                  "refund of " + std::to_string(*amount) + " from " + quoted_id(transaction_id) +
                      " needs a refund id (partial refunds are idempotent by it)");
    }
  }
  if (!refund_id.empty()) {
    validate_key_part("refund id", refund_id, ":");
  }
  if (original != nullptr && amount && *amount > original->amount) {
    // never refundable (a record's amount is the original's, or less once confirmed for less);
    // refused before anything is sent: past the horizon the refund would record the original
    // anew (a cluster's home record, op adopt) before it is decided
    throw Error(errc::invalid_argument,
                "refund of " + std::to_string(*amount) + " from " + quoted_id(transaction_id) +
                    " is more than its original amount " + std::to_string(original->amount));
  }
  std::vector<std::string> args{"refund", amount ? std::to_string(*amount) : "-1",
                                amount ? refund_id : ""};
  const Reply reply = freeing_transition(LimitOp::refund, transaction_id, args, original);
  const detail::ReplyStatus status = detail::reply_status(reply);
  throw_if_mismatch(status, LimitOp::refund, transaction_id);
  if (status == detail::ReplyStatus::refunded) {
    return {reply.at(1).to_int64(), reply.at(2).to_int64(), reply.at(3).to_int64(),
            reply.at(4).as_string() == "1"};
  }
  if (status == detail::ReplyStatus::conflict) {
    const std::string first = reply.at(1).as_string();
    throw Error(errc::conflict,
                "refund id \"" + refund_id + "\" of " + quoted_id(transaction_id) +
                    " was first used for " + (first == "-1" ? "the full refund" : first) +
                    ", not " + (amount ? std::to_string(*amount) : "the full refund"),
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::unknown) {
    throw Error(errc::not_found,
                "refund: " + quoted_id(transaction_id) +
                    " is unknown: never decided, or decided before the replay horizon (" +
                    std::to_string(options_.replay_horizon.count()) +
                    " ms); refund it with the original transaction",
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::bad_state) {
    throw Error(errc::conflict,
                "refund: " + quoted_id(transaction_id) + " is " + reply.at(1).as_string() +
                    ", so nothing of it was consumed",
                Outcome::failed);
  }
  if (status == detail::ReplyStatus::too_much) {
    throw Error(errc::invalid_argument,
                "refund of " + std::to_string(amount.value_or(0)) + " from " +
                    quoted_id(transaction_id) + " is more than the " + reply.at(1).as_string() +
                    " still refundable",
                Outcome::failed);
  }
  throw_unexpected(reply, "refund " + transaction_id);
}

} // namespace limitcounter

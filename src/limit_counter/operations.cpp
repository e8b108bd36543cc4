// LimitCounter's operator calls: an audited correction of a counter, and a transaction's
// record read back. Used by limitctl (tools/limitctl) and by hosts that reconcile.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>
#include <map>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/record_text.hpp"
#include "limit_counter/codec/reply_status.hpp"
#include "limit_counter/declared_keys.hpp"
#include "limit_counter/window_closed.hpp"
#include "shared/amount.hpp"
#include "shared/note.hpp"

namespace limitcounter {
namespace {

constexpr std::size_t max_note_bytes = 256;

std::string millis(TimePoint at) { return std::to_string(detail::unix_millis(at)); }

// A delta may be negative; its size must fit a Lua number exactly.
void check_delta(const std::string& what, std::int64_t delta) {
  if (delta < -max_exact_integer || delta > max_exact_integer) {
    throw Error(errc::precision_overflow,
                what + " " + std::to_string(delta) +
                    " is 2^53 or more in size, which Redis Lua numbers cannot hold exactly");
  }
}

Usage usage_at(const Reply& reply, std::size_t index) {
  return {reply.at(index).to_int64(), reply.at(index + 1).to_int64()};
}

std::optional<TimePoint> time_of(const std::string& millis_text) {
  if (millis_text.empty()) {
    return std::nullopt;
  }
  return TimePoint(std::chrono::milliseconds(std::stoll(millis_text)));
}

} // namespace

CorrectionResult LimitCounter::Impl::adjust(std::string_view counter, const Dimension& dimension,
                                            Period period, const CounterCorrection& correction,
                                            TimePoint at) {
  CounterKeys::validate_counter_name(counter);
  validate_key_part("correction id", correction.id, ":");
  const std::string what = "correction " + correction.id;
  check_delta(what + " count", correction.count);
  check_delta(what + " amount", correction.amount);
  if (correction.count == 0 && correction.amount == 0) {
    throw Error(errc::invalid_argument, what + " changes nothing (count and amount are 0)");
  }
  detail::validate_note(what + " author", correction.author, max_note_bytes);
  detail::validate_note(what + " reason", correction.reason, max_note_bytes);
  const TimePoint now = Clock::now();
  CorrectionResult result;
  result.window = calendar_.window(period, at);
  detail::check_window_open(counter, period, result.window, options_.window_grace, now);
  const TimePoint key_expiry = result.window.end + options_.window_grace;
  const TimePoint record_expiry = std::max(key_expiry, now + options_.replay_horizon);
  const std::string count = std::to_string(correction.count);
  const std::string amount = std::to_string(correction.amount);
  const std::string period_name(to_string(period));
  // Everything that makes the correction what it is: a retry must carry the same.
  std::string fingerprint;
  for (const std::string& part :
       {std::string(counter), period_name, result.window.id, dimension.field(), count, amount,
        correction.author, correction.reason}) {
    fingerprint.append(std::to_string(part.size())).append(1, ':').append(part);
  }
  const std::string tag = keys_.tag(counter, dimension.field());
  const Reply reply =
      redis_.eval(scripts::counter_adjust,
                  {keys_.window(tag, period, result.window.id), keys_.audit(tag),
                   keys_.correction(tag, correction.id)},
                  {dimension.field(), count, amount, millis(key_expiry), millis(record_expiry),
                   fingerprint, correction.author, correction.reason, millis(now),
                   std::string(counter), period_name, result.window.id, correction.id},
                  Resend::same_id);
  const std::string& answer = reply.at(0).as_string();
  if (answer == "adjusted") {
    result.before = usage_at(reply, 1);
    result.after = usage_at(reply, 3);
    result.audit_id = reply.at(5).as_string();
    result.replayed = reply.at(6).as_string() == "1";
    return result;
  }
  if (answer == "conflict") {
    throw Error(errc::conflict, what + " was applied before with another content", Outcome::failed);
  }
  const std::string totals = " (count " + reply.at(1).as_string() + ", amount " +
                             reply.at(2).as_string() + ") of " + std::string(counter) + " " +
                             dimension.field() + " in " + period_name + " window " +
                             result.window.id + "; nothing was written";
  if (answer == "negative") {
    throw Error(errc::invalid_argument, what + " would leave a negative total" + totals,
                Outcome::failed);
  }
  if (answer == "overflow") {
    throw Error(errc::precision_overflow, what + " would leave a total past 2^53 - 1" + totals,
                Outcome::failed);
  }
  throw Error(errc::protocol_error, what + ": " + reply.debug_string(), Outcome::unknown);
}

std::optional<TransactionRecord>
LimitCounter::Impl::transaction_record(const std::string& transaction_id,
                                       const std::vector<std::string>& counters) {
  validate_key_part("transaction id", transaction_id, ":");
  for (const std::string& counter : counters) {
    CounterKeys::validate_counter_name(counter);
  }
  std::vector<std::string> candidates{keys_.transaction(transaction_id)};
  TransactionRecord record;
  bool authority = false; // the record that says what the transaction is has been read
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string key = candidates[i];
    if (std::find(record.records.begin(), record.records.end(), key) != record.records.end()) {
      continue;
    }
    const Reply reply = detail::eval_declaring(
        redis_, {&scripts::limit_read_only, {key}, {"inspect"}, Resend::same_id});
    if (detail::reply_status(reply) == detail::ReplyStatus::missing) {
      continue;
    }
    record.records.push_back(key);
    std::map<std::string, std::string> fields;
    const auto pairs = static_cast<std::size_t>(reply.at(2).to_int64());
    for (std::size_t j = 0; j < pairs; ++j) {
      fields[reply.at(3 + 2 * j).as_string()] = reply.at(4 + 2 * j).as_string();
    }
    const bool home = fields.count("plan") > 0; // (a share's record has none)
    if (home) {
      for (auto& share : share_records(transaction_id, fields["plan"])) {
        candidates.push_back(std::move(share));
      }
    }
    const auto named = fields.find("state"); // (operator[] would add an empty one)
    const TransactionState state = named == fields.end()
                                       ? TransactionState::tombstone
                                       : detail::transaction_state(named->second, "record " + key);
    // A voided share gave back what it took: its keys are not the transaction's.
    if (state != TransactionState::voided) {
      for (const auto line : detail::split(fields["keys"], '\n')) { // "<key> <field>"
        record.counter_keys.emplace_back(line.substr(0, line.find(' ')));
      }
    }
    if (!record.decided_at) {
      record.decided_at = time_of(fields["at"]); // a home has none: its first share's
    }
    if (authority) {
      continue; // a share of a home read before: the home says what the transaction is
    }
    authority = true;
    const std::int64_t expiry = reply.at(1).to_int64();
    if (expiry >= 0) {
      record.expires_at = TimePoint(std::chrono::milliseconds(expiry));
    }
    record.state = state;
    record.amount = fields.count("amount") ? std::stoll(fields["amount"]) : 0;
    record.refunded = fields.count("refunded") ? std::stoll(fields["refunded"]) : 0;
    record.hold_expires = time_of(fields["hexp"]);
    for (const auto& [name, value] : fields) {
      // r:<refund id> (rf: the full refund) = "<asked>:<given>"
      if (name == "rf" || name.rfind("r:", 0) == 0) {
        const auto cut = value.rfind(':');
        record.refunds.emplace_back(name == "rf" ? "" : name.substr(2),
                                    std::stoll(value.substr(cut + 1)));
      }
    }
    if (home) {
      record.decision = detail::decode_stored_decision(record.state, fields["denial"],
                                                       transaction_id, record.amount);
    } else if (fields.count("state")) {
      record.decision = Decision{};
      if (fields.count("denial")) {
        record.decision->verdict = Decision::Verdict::denied;
        record.decision->denial =
            detail::decode_denial(fields["denial"], transaction_id, record.amount);
      }
    }
    if (record.decision) {
      record.decision->state = record.state;
    }
  }
  if (record.records.empty()) {
    return std::nullopt;
  }
  return record;
}

} // namespace limitcounter

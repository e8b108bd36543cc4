#include <limitcounter/wallet.hpp>

#include <cstdlib>

#include <limitcounter/detail/lua_scripts.hpp>
#include <limitcounter/error.hpp>

#include "shared/amount.hpp"
#include "shared/batch.hpp"
#include "shared/note.hpp"
#include "shared/observed.hpp"

namespace limitcounter {
namespace {

std::string millis(TimePoint at) { return std::to_string(detail::unix_millis(at)); }

void validate_user(const std::string& user) { validate_key_part("wallet user", user); }
void validate_order(const std::string& order) { validate_key_part("wallet order", order, ":"); }

// The reason goes into the account hash and the journal (see validate_note).
void validate_freeze_reason(const std::string& user, const std::string& reason) {
  detail::validate_note("freeze reason of wallet " + user, reason, Wallet::max_freeze_reason_bytes);
}

// The observer's status words (see `LimitObserver::on_wallet_operation`).
std::string_view status_word(const WalletResult& result) {
  if (result.replayed) {
    return "replayed";
  }
  switch (result.status) {
  case WalletResult::Status::ok: return "ok";
  case WalletResult::Status::insufficient: return "insufficient";
  case WalletResult::Status::not_loaded: return "not_loaded";
  case WalletResult::Status::frozen: return "frozen";
  }
  return "other";
}

std::string_view status_word(const RollbackResult& result) {
  if (result.replayed) {
    return "replayed";
  }
  switch (result.status) {
  case RollbackResult::Status::rolled_back: return "rolled_back";
  case RollbackResult::Status::recorded_unknown: return "recorded_unknown";
  }
  return "other";
}

std::string_view status_word(bool changed) { return changed ? "changed" : "unchanged"; }

// Reports one `op` call (or batch item) to `observer` (not null): its status, or "error".
auto report_to(LimitObserver* observer, WalletOp op) {
  return [observer, op](const auto* result, std::chrono::nanoseconds latency) {
    observer->on_wallet_operation(op, result ? status_word(*result) : "error", latency);
  };
}

// `run()`, reported to `observer` (if any) as one `op` call.
template <typename Run> auto observed(LimitObserver* observer, WalletOp op, Run&& run) {
  return detail::observed_call(observer, std::forward<Run>(run), report_to(observer, op));
}

} // namespace

Wallet::Wallet(Redis redis, WalletOptions options, Loader loader)
    : redis_(std::move(redis)), options_(std::move(options)),
      keys_(options_.key_prefix, options_.partitions), loader_(std::move(loader)) {
  if (options_.order_ttl.count() < 1) {
    throw Error(errc::invalid_argument, "wallet order_ttl must be positive");
  }
}

std::vector<std::string> Wallet::user_keys(const std::string& user,
                                           const std::string& order) const {
  const std::uint32_t partition = keys_.partition_of(user);
  return {keys_.account(user),      keys_.order(user, order), keys_.user_pending(user),
          keys_.journal(partition), keys_.pending(partition), keys_.high_water(user)};
}

bool Wallet::load(const std::string& user, const AccountSnapshot& snapshot) {
  validate_user(user);
  if (std::abs(snapshot.balance) > max_exact_integer ||
      std::abs(snapshot.threshold) > max_exact_integer) {
    throw Error(errc::precision_overflow,
                "wallet " + user + " balance " + std::to_string(snapshot.balance) +
                    " or threshold " + std::to_string(snapshot.threshold) + " is beyond 2^53");
  }
  detail::check_quantity("wallet " + user + " version", snapshot.version);
  if (!snapshot.freeze_reason.empty()) {
    validate_freeze_reason(user, snapshot.freeze_reason);
  }
  // (the record key of order "-" tells the script where the user's order records are)
  const Reply reply = redis_.eval(
      scripts::wallet, user_keys(user, "-"),
      {"load", std::to_string(snapshot.balance), std::to_string(snapshot.version),
       std::to_string(snapshot.threshold), millis(Clock::now()), snapshot.freeze_reason});
  const std::string& status = reply.at(0).as_string();
  if (status == "parked") {
    // The user's later events went on, so the snapshot's version cannot tell what it lacks.
    throw Error(errc::conflict,
                "wallet " + user + ": " + std::to_string(reply.at(1).to_int64()) +
                    " journal event(s) of the user parked in the persister group's dead letters "
                    "(JournalConsumer::dead_letters), so no snapshot (this one: version " +
                    std::to_string(snapshot.version) +
                    ") is known to contain them; nothing loaded: write each parked event to the "
                    "system of record and acknowledge it with the persister group first",
                Outcome::failed);
  }
  if (status == "behind" || status == "unpersisted") {
    std::string lacks;
    if (status == "unpersisted") {
      lacks = "the change of version " + std::to_string(reply.at(1).to_int64());
    } else {
      const std::int64_t version = reply.at(2).to_int64();
      lacks = "order " + reply.at(1).as_string() +
              (version < 0 ? " (made before the high-water mark: its version is not known)"
                           : " of version " + std::to_string(version));
    }
    throw Error(errc::conflict,
                "wallet " + user + ": the snapshot of version " + std::to_string(snapshot.version) +
                    " lacks " + lacks +
                    ", not yet persisted; nothing loaded: retry once the persister has written it",
                Outcome::failed);
  }
  return status == "loaded";
}

void Wallet::load_once(const std::string& user) {
  std::promise<void> promise;
  std::shared_future<void> pending;
  bool mine = false;
  {
    const std::lock_guard<std::mutex> lock(loading_mutex_);
    auto found = loading_.find(user);
    if (found == loading_.end()) {
      found = loading_.emplace(user, promise.get_future().share()).first;
      mine = true;
    }
    pending = found->second;
  }
  if (!mine) {
    pending.get(); // rethrows the loader's error to every waiter
    return;
  }
  try {
    // A load by another caller may have ended between this caller's miss and here (its entry
    // is gone once the account is written): then the account is there, and the loader (the
    // system of record) is not asked again.
    const bool loaded_meanwhile = redis_.command({"EXISTS", keys_.account(user)}).as_integer() == 1;
    if (!loaded_meanwhile) {
      if (const auto snapshot = loader_(user)) {
        load(user, *snapshot);
      }
    }
    promise.set_value();
  } catch (...) {
    promise.set_exception(std::current_exception());
  }
  {
    const std::lock_guard<std::mutex> lock(loading_mutex_);
    loading_.erase(user);
  }
  pending.get();
}

std::optional<Error> Wallet::load_missing(const std::string& user) {
  try {
    load_once(user);
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(errc::not_found, "the loader of wallet user " + user + " threw: " + e.what(),
                 Outcome::not_sent);
  } catch (...) {
    return Error(errc::not_found, "the loader of wallet user " + user + " threw a non-exception",
                 Outcome::not_sent);
  }
}

ScriptCall Wallet::change_call(const char* op, const WalletOrder& order) const {
  validate_user(order.user);
  validate_order(order.order);
  detail::check_quantity(std::string("wallet ") + op + " amount", order.amount, true);
  return {&scripts::wallet,
          user_keys(order.user, order.order),
          {op, order.user, order.order, std::to_string(order.amount), millis(order.at),
           std::to_string(options_.order_ttl.count())},
          Resend::same_id};
}

namespace {

bool is_not_loaded(const Reply& reply) {
  return !reply.is_error() && reply.at(0).as_string() == "not_loaded";
}

WalletResult decode_change(const char* op, const WalletOrder& order, const Reply& reply) {
  const std::string& status = reply.at(0).as_string();
  WalletResult result;
  if (status == "ok" || status == "replay") {
    result.replayed = status == "replay";
    result.balance = reply.at(1).to_int64();
    result.version = reply.at(2).to_int64();
    result.event_id = reply.at(3).as_string();
  } else if (status == "insufficient") {
    result.status = WalletResult::Status::insufficient;
    result.balance = reply.at(1).to_int64();
    result.version = reply.at(2).to_int64();
  } else if (status == "frozen") {
    result.status = WalletResult::Status::frozen;
    result.balance = reply.at(1).to_int64();
    result.version = reply.at(2).to_int64();
    result.freeze_reason = reply.at(3).as_string();
  } else if (status == "not_loaded") {
    result.status = WalletResult::Status::not_loaded;
  } else if (status == "rolled_back") {
    throw Error(errc::conflict,
                "wallet order " + order.order + " of " + order.user +
                    " was rolled back; it never runs again",
                Outcome::failed);
  } else if (status == "conflict") {
    throw Error(errc::conflict,
                "wallet order " + order.order + " of " + order.user + " was a " +
                    reply.at(1).as_string() + " of " + reply.at(2).as_string() + ", not a " + op +
                    " of " + std::to_string(order.amount),
                Outcome::failed);
  } else if (status == "overflow") {
    throw Error(errc::precision_overflow,
                "wallet " + order.user + " balance " + reply.at(1).as_string() + " + " +
                    reply.at(2).as_string() + " would pass 2^53 - 1",
                Outcome::failed);
  } else {
    throw Error(errc::protocol_error, std::string("wallet ") + op + ": " + reply.debug_string(),
                Outcome::unknown);
  }
  return result;
}

} // namespace

Reply Wallet::eval_loading(const std::string& user, const std::vector<std::string>& keys,
                           const std::vector<std::string>& args) {
  Reply reply = redis_.eval(scripts::wallet, keys, args, Resend::same_id);
  if (is_not_loaded(reply) && loader_) {
    if (auto error = load_missing(user)) {
      throw *error;
    }
    reply = redis_.eval(scripts::wallet, keys, args, Resend::same_id);
  }
  return reply;
}

WalletResult Wallet::change(const char* op, const WalletOrder& order) {
  const ScriptCall call = change_call(op, order);
  return decode_change(op, order, eval_loading(order.user, call.keys, call.args));
}

WalletResult Wallet::deduct(const std::string& user, const std::string& order, std::int64_t amount,
                            TimePoint at) {
  return observed(options_.observer.get(), WalletOp::deduct, [&] {
    return change("deduct", {user, order, amount, at});
  });
}

WalletResult Wallet::credit(const std::string& user, const std::string& order, std::int64_t amount,
                            TimePoint at) {
  return observed(options_.observer.get(), WalletOp::credit, [&] {
    return change("credit", {user, order, amount, at});
  });
}

std::vector<BatchResult<WalletResult>> Wallet::deduct_many(const std::vector<WalletOrder>& orders) {
  LimitObserver* observer = options_.observer.get();
  return detail::observed_batch_call<WalletResult>(
      observer, [&] { return run_deduct_many(orders); },
      report_to(observer, WalletOp::deduct_many));
}

std::vector<BatchResult<WalletResult>>
Wallet::run_deduct_many(const std::vector<WalletOrder>& orders) {
  std::vector<ScriptCall> calls;
  calls.reserve(orders.size());
  for (const auto& order : orders) {
    calls.push_back(change_call("deduct", order));
  }
  if (calls.empty()) {
    return {};
  }
  std::vector<Reply> replies = redis_.eval_pipeline(calls);
  // Orders of users that were not cached did not run: load each such user once, then
  // send just those orders again, in their order.
  // Per user that was not cached: nothing if the loader ran, else the Error it ended in.
  std::map<std::string, std::optional<Error>> loads;
  std::vector<std::size_t> again;
  for (std::size_t i = 0; loader_ && i < orders.size(); ++i) {
    if (!is_not_loaded(replies[i])) {
      continue;
    }
    const std::string& user = orders[i].user;
    auto [load, first_miss] = loads.try_emplace(user);
    if (first_miss) {
      load->second = load_missing(user);
    }
    if (!load->second) {
      again.push_back(i);
    }
  }
  if (!again.empty()) {
    std::vector<ScriptCall> retry;
    retry.reserve(again.size());
    for (const std::size_t i : again) {
      retry.push_back(std::move(calls[i]));
    }
    std::vector<Reply> retried = redis_.eval_pipeline(retry);
    for (std::size_t j = 0; j < again.size(); ++j) {
      replies[again[j]] = std::move(retried[j]);
    }
  }
  return detail::decode_batch<WalletResult>(replies, [&](std::size_t i, const Reply& reply) {
    if (const auto load = loads.find(orders[i].user); load != loads.end() && load->second) {
      throw *load->second;
    }
    return decode_change("deduct", orders[i], reply);
  });
}

RollbackResult Wallet::rollback(const std::string& user, const std::string& order, TimePoint at) {
  return observed(options_.observer.get(), WalletOp::rollback,
                  [&] { return run_rollback(user, order, at); });
}

RollbackResult Wallet::run_rollback(const std::string& user, const std::string& order,
                                    TimePoint at) {
  validate_user(user);
  validate_order(order);
  // An order done whose user was evicted is reversed after a reload (the script refuses a
  // reload older than the order).
  const Reply reply = eval_loading(
      user, user_keys(user, order),
      {"rollback", user, order, millis(at), std::to_string(options_.order_ttl.count())});
  const std::string& status = reply.at(0).as_string();
  // "already": rolled back before, by an earlier rollback (also one that recorded it unknown)
  if (status == "rolled_back" || status == "already") {
    return {RollbackResult::Status::rolled_back, status == "already"};
  }
  if (status == "unknown") {
    return {RollbackResult::Status::recorded_unknown, false};
  }
  const std::string what = "rollback of " + order + " of wallet " + user;
  if (status == "not_loaded") {
    throw Error(errc::not_found, what + ": the user is not cached and no loader has it",
                Outcome::failed);
  }
  if (status == "stale") {
    throw Error(errc::conflict,
                what + ": the cached account is at version " +
                    std::to_string(reply.at(1).to_int64()) + ", before the order's version " +
                    std::to_string(reply.at(2).to_int64()) +
                    " (the system of record has not seen the order yet); retry once it has",
                Outcome::failed);
  }
  if (status == "overflow") {
    throw Error(errc::precision_overflow,
                what + ": balance " + reply.at(1).as_string() + " and amount " +
                    reply.at(2).as_string() + " would leave the balance beyond 2^53 - 1",
                Outcome::failed);
  }
  throw Error(errc::protocol_error, "wallet rollback: " + reply.debug_string(), Outcome::unknown);
}

bool Wallet::set_frozen(const char* op, const std::string& user, const std::string& reason,
                        TimePoint at) {
  validate_user(user);
  validate_freeze_reason(user, reason);
  // A freeze must hold whatever the cache holds: a user not cached is loaded first.
  const Reply reply = eval_loading(user, user_keys(user, "-"), {op, user, reason, millis(at)});
  const std::string& status = reply.at(0).as_string();
  if (status == "changed") {
    return true;
  }
  if (status == "unchanged") {
    return false;
  }
  if (status == "not_loaded") {
    throw Error(errc::not_found,
                std::string(op) + " of wallet " + user +
                    ": the user is not cached and no loader has it",
                Outcome::failed);
  }
  throw Error(errc::protocol_error, std::string("wallet ") + op + ": " + reply.debug_string(),
              Outcome::unknown);
}

bool Wallet::freeze(const std::string& user, const std::string& reason, TimePoint at) {
  return observed(options_.observer.get(), WalletOp::freeze,
                  [&] { return set_frozen("freeze", user, reason, at); });
}

bool Wallet::unfreeze(const std::string& user, const std::string& reason, TimePoint at) {
  return observed(options_.observer.get(), WalletOp::unfreeze,
                  [&] { return set_frozen("unfreeze", user, reason, at); });
}

std::optional<Account> Wallet::account(const std::string& user) {
  validate_user(user);
  const Reply reply =
      redis_.command({"HMGET", keys_.account(user), "balance", "threshold", "version", "updated",
                      "frozen", "freeze_reason", "freeze_time"});
  if (reply.at(0).is_nil()) {
    return std::nullopt;
  }
  Account account{reply.at(0).to_int64(), reply.at(1).to_int64(), reply.at(2).to_int64(),
                  TimePoint{std::chrono::milliseconds{reply.at(3).to_int64()}}};
  account.frozen = !reply.at(4).is_nil() && reply.at(4).as_string() == "1";
  if (!reply.at(5).is_nil()) {
    account.freeze_reason = reply.at(5).as_string();
    account.freeze_changed = TimePoint{std::chrono::milliseconds{reply.at(6).to_int64()}};
  }
  return account;
}

std::vector<std::string> Wallet::pending_orders(const std::string& user,
                                                std::chrono::milliseconds older_than,
                                                TimePoint now) {
  validate_user(user);
  std::vector<std::string> orders;
  const Reply reply =
      redis_.command({"ZRANGEBYSCORE", keys_.user_pending(user), "-inf", millis(now - older_than)});
  for (const Reply& item : reply.as_array()) {
    orders.push_back(item.as_string());
  }
  return orders;
}

std::vector<std::string> Wallet::stale_pending(std::uint32_t partition,
                                               std::chrono::milliseconds older_than,
                                               TimePoint now) {
  if (partition >= keys_.partitions()) {
    throw Error(errc::invalid_argument, "wallet partition " + std::to_string(partition) +
                                            " is not below " + std::to_string(keys_.partitions()));
  }
  std::vector<std::string> orders;
  const Reply reply =
      redis_.command({"ZRANGEBYSCORE", keys_.pending(partition), "-inf", millis(now - older_than)});
  for (const Reply& item : reply.as_array()) {
    orders.push_back(item.as_string());
  }
  return orders;
}

Wallet::Comparison Wallet::compare(const std::string& user, std::int64_t balance,
                                   std::int64_t version) {
  Comparison comparison;
  if (const auto cached = account(user)) {
    comparison.cached = true;
    comparison.cached_balance = cached->balance;
    comparison.cached_version = cached->version;
    comparison.matches = cached->balance == balance && cached->version == version;
  }
  return comparison;
}

} // namespace limitcounter

// LimitCounter on a Redis Cluster (src/limit_counter/cluster/): a transaction is decided in shares,
// one lua/limit.lua call per slot its rules' counters live in (one or more), under one
// authoritative home record (lua/transaction_home.lua) in the slot of the transaction id. The home
// record is begun first, the shares run in parallel (one pipeline per node), and the home record's
// compare-and-set makes the decision final: exactly one caller of an id is first, and every
// later caller replays the home record's decision. Confirm, cancel and refund are decided at
// the home record and then applied to every share of its plan. Here: the script calls at a home
// record and at the share records of its plan.
#include "limit_counter/limit_counter_impl.hpp"

#include <algorithm>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/codec/common.hpp"
#include "limit_counter/codec/decide_arguments.hpp"
#include "limit_counter/declared_keys.hpp"

namespace limitcounter {

std::vector<std::string> LimitCounter::Impl::share_records(const std::string& transaction_id,
                                                           const std::string& plan) const {
  std::vector<std::string> records;
  for (const auto tag : detail::split(plan, '\n')) {
    records.push_back(keys_.transaction_share(tag, transaction_id));
  }
  return records;
}

std::string LimitCounter::Impl::home_fingerprint(const PreparedDecision& prepared) {
  const auto& args = prepared.shares.front().args;
  return detail::decide_fingerprint(args) + ':' + detail::decide_amount(args);
}

Reply LimitCounter::Impl::run_home(const std::string& transaction_id,
                                   const std::vector<std::string>& args) {
  return redis_.eval(scripts::transaction_home, {keys_.transaction(transaction_id)}, args,
                     Resend::same_id);
}

std::vector<Reply>
LimitCounter::Impl::run_on_shares(const std::vector<std::string>& plan,
                                  const std::vector<std::vector<std::string>>& operations,
                                  const std::vector<ScriptCall>& last_instead) {
  std::vector<ScriptCall> calls;
  calls.reserve(plan.size() * operations.size());
  for (const auto& record : plan) {
    for (const auto& args : operations) {
      calls.push_back({&scripts::limit, {record}, args, Resend::same_id});
    }
    const auto instead =
        std::find_if(last_instead.begin(), last_instead.end(),
                     [&](const ScriptCall& call) { return call.keys.front() == record; });
    if (instead != last_instead.end() && !operations.empty()) {
      calls.back() = *instead;
    }
  }
  std::vector<Reply> replies = detail::eval_pipeline_declaring(redis_, std::move(calls));
  for (const Reply& reply : replies) {
    if (reply.is_error()) {
      throw Error(errc::server_error, "a share of a transaction: " + reply.as_string(),
                  Outcome::failed);
    }
  }
  return replies;
}

} // namespace limitcounter

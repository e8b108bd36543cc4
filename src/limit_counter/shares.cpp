// LimitCounter on a Redis Cluster: a transaction is decided in shares, one lua/limit.lua call
// per slot its rules' counters live in (one or more), under one authoritative home record
// (lua/transaction_home.lua) in the slot of the transaction id. The home record is begun
// first, the shares run in parallel (one pipeline per node), and the home record's
// compare-and-set makes the decision final: exactly one caller of an id is first, and every
// later caller replays the home record's decision. Confirm, cancel and refund are decided at
// the home record and then applied to every share of its plan.
#include <limitcounter/limit_counter.hpp>

#include <algorithm>
#include <map>

#include <limitcounter/detail/lua_scripts.hpp>

#include "limit_counter/declared_keys.hpp"
#include "limit_counter/limit_codec.hpp"
#include "limit_counter/share_plan.hpp"
#include "redis/key_slot.hpp"
#include "redis/operation_resends.hpp"
#include "shared/amount.hpp"
#include "shared/batch.hpp"
#include "shared/coalescer.hpp"

namespace limitcounter {
namespace {

using detail::quoted_id;

std::string joined_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) {
    text.append(text.empty() ? "" : "\n").append(line);
  }
  return text;
}

} // namespace

std::vector<std::string> LimitCounter::share_records(const std::string& transaction_id,
                                                     const std::string& plan) const {
  std::vector<std::string> records;
  for (const auto tag : detail::split(plan, '\n')) {
    records.push_back(keys_.transaction_share(tag, transaction_id));
  }
  return records;
}

std::string LimitCounter::home_fingerprint(const PreparedDecision& prepared) {
  const auto& args = prepared.shares.front().args;
  return detail::decide_fingerprint(args) + ':' + detail::decide_amount(args);
}

Reply LimitCounter::run_home(const std::string& transaction_id,
                             const std::vector<std::string>& args) {
  return redis_.eval(scripts::transaction_home, {keys_.transaction(transaction_id)}, args,
                     Resend::same_id);
}

std::vector<Reply>
LimitCounter::run_on_shares(const std::vector<std::string>& plan,
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

// A peek spread over several slots writes nothing: its shares run side by side and the
// strictest answer is the decision.
Decision LimitCounter::check_in_shares(const Transaction& transaction,
                                       const PreparedDecision& prepared) {
  const std::vector<Reply> replies = redis_.eval_pipeline(prepared.shares);
  Decision combined;
  combined.dry_run = true;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    Decision part = finish_decide("check", transaction, prepared.shapes[i], replies[i]);
    combined.rules.insert(combined.rules.end(), part.rules.begin(), part.rules.end());
    if (!part.allowed() && !combined.denial) {
      combined.verdict = part.verdict;
      combined.denial = part.denial;
    }
  }
  return combined;
}

Decision LimitCounter::decide_in_shares(std::string_view op, const Transaction& transaction,
                                        const PreparedDecision& prepared) {
  if (op == "check") {
    return check_in_shares(transaction, prepared);
  }
  return detail::value_or_throw(
      std::move(decide_many_in_shares(op, {&transaction}, {&prepared})[0]));
}

namespace {

// A home record's reply as `Redis::eval` would have it: an error reply thrown.
const Reply& home_reply(const Reply& reply) {
  if (reply.is_error()) {
    throw Error(errc::server_error, "script transaction_home: " + reply.as_string(),
                Outcome::failed);
  }
  return reply;
}

// An error after the home record was begun: some shares may have run, so only the same id
// settles it (a bad input, or an outcome already unknown, says so itself).
Error half_decided(const Error& error, const std::string& transaction_id) {
  if (error.is_input_error() || error.outcome() == Outcome::unknown) {
    return error;
  }
  return Error(static_cast<errc>(error.code().value()),
               std::string(error.what()) + "; " + quoted_id(transaction_id) +
                   " may be half decided: retry it with the same id",
               Outcome::unknown);
}

} // namespace

Decision LimitCounter::consume_in_shares(const Transaction& transaction,
                                         const PreparedDecision& prepared) {
  SpreadConsumeJob job;
  job.transaction = &transaction;
  job.prepared = &prepared;
  spread_coalescer_->run(job, [this](SpreadConsumeJob* const* jobs, std::size_t count) {
    std::vector<const Transaction*> transactions;
    std::vector<const PreparedDecision*> prepared_all;
    for (std::size_t i = 0; i < count; ++i) {
      transactions.push_back(jobs[i]->transaction);
      prepared_all.push_back(jobs[i]->prepared);
    }
    try {
      std::vector<BatchResult<Decision>> results =
          decide_many_in_shares("consume", transactions, prepared_all);
      for (std::size_t i = 0; i < count; ++i) {
        jobs[i]->result = std::move(results[i]);
      }
    } catch (const Error& e) { // (not one transaction's: any of them may have run)
      for (std::size_t i = 0; i < count; ++i) {
        jobs[i]->result = half_decided(e, jobs[i]->transaction->id);
      }
    }
  });
  return detail::value_or_throw(std::move(*job.result));
}

namespace {

// Every transaction's shares in one pipeline (one per node): `shares_of[k]` the k-th
// transaction's; consumes' shares of one slot (`batch_consumes`) go in batch calls of
// lua/limit.lua, each transaction decided on its own. Returns per transaction its shares'
// replies in order, or the error that is its: a call not sent or lost keeps its error reply in
// place (eval_pipeline with refusals); the pipeline thrown as a whole, or a batch call's reply
// that cannot be split, is every transaction's in it.
std::vector<BatchResult<std::vector<Reply>>>
run_shares(Redis& redis, bool batch_consumes,
           const std::vector<const std::vector<ScriptCall>*>& shares_of) {
  using Member = std::pair<std::size_t, std::size_t>; // (transaction, share)
  std::vector<BatchResult<std::vector<Reply>>> out;
  out.reserve(shares_of.size());
  std::vector<ScriptCall> calls;
  std::vector<std::vector<Member>> call_members;
  std::map<std::uint16_t, std::vector<Member>> by_slot;
  // One transaction's shares are one per slot: alone, they are sent as they are, not copied.
  const bool alone = shares_of.size() == 1;
  for (std::size_t k = 0; k < shares_of.size(); ++k) {
    const std::vector<ScriptCall>& shares = *shares_of[k];
    out.emplace_back(std::vector<Reply>(shares.size()));
    for (std::size_t s = 0; s < shares.size(); ++s) {
      if (batch_consumes && !alone) {
        by_slot[detail::key_slot(shares[s].keys.front())].emplace_back(k, s);
        continue;
      }
      if (!alone) {
        calls.push_back(shares[s]);
      }
      call_members.push_back({{k, s}});
    }
  }
  const auto share = [&](const Member& member) -> const ScriptCall& {
    return (*shares_of[member.first])[member.second];
  };
  for (const auto& [slot, members] : by_slot) {
    for (std::size_t from = 0; from < members.size(); from += detail::max_decide_batch) {
      const std::size_t upto = std::min(members.size(), from + detail::max_decide_batch);
      call_members.emplace_back(members.begin() + from, members.begin() + upto);
      if (upto - from == 1) {
        calls.push_back(share(members[from]));
        continue;
      }
      detail::DecideBatch batch;
      for (std::size_t m = from; m < upto; ++m) {
        ScriptCall copy = share(members[m]);
        batch.add(std::move(copy.keys), std::move(copy.args));
      }
      auto [keys, args] = batch.take();
      calls.push_back({&scripts::limit, std::move(keys), std::move(args), Resend::same_id});
    }
  }
  const std::vector<ScriptCall>& sent = alone ? *shares_of.front() : calls;
  if (sent.empty()) {
    return out;
  }
  std::vector<Reply> replies;
  std::vector<std::optional<Error>> refusals; // (their error replies in place say so)
  try {
    replies = redis.eval_pipeline(sent, refusals);
  } catch (const Error& e) {
    std::fill(out.begin(), out.end(), BatchResult<std::vector<Reply>>(e));
    return out;
  }
  for (std::size_t c = 0; c < replies.size(); ++c) {
    const std::vector<Member>& members = call_members[c];
    std::vector<Reply> own;
    if (members.size() == 1 || replies[c].is_error()) {
      own.assign(members.size(), replies[c]);
    } else {
      try {
        own = detail::split_decide_replies(replies[c], members.size());
      } catch (const Error& e) {
        for (const Member& member : members) {
          out[member.first] = e;
        }
        continue;
      }
    }
    for (std::size_t m = 0; m < members.size(); ++m) {
      if (auto* replies_of = std::get_if<std::vector<Reply>>(&out[members[m].first])) {
        (*replies_of)[members[m].second] = std::move(own[m]);
      }
    }
  }
  return out;
}

} // namespace

// Several transactions cost three round trips in all, not three each: a step's calls of every
// transaction go in one pipeline (one per node), and a transaction takes the next step only
// once its own previous step answered; the consumes' shares of one slot go in batch calls of
// lua/limit.lua (each transaction decided on its own, as consume_many's on standalone). Each
// transaction takes the steps it would take alone and fails on its own, except where it shares
// a call: a lost reply of a node's pipeline, or an error reply of a batch call, is every
// transaction's in it (Outcome::unknown; the other nodes' calls go on). As for concurrent callers,
// a transaction's shares may see what another transaction's shares took in other slots before that
// one was denied and gave it back: the voids come with the finishes.
std::vector<BatchResult<Decision>>
LimitCounter::decide_many_in_shares(std::string_view op,
                                    const std::vector<const Transaction*>& transactions,
                                    const std::vector<const PreparedDecision*>& prepared) {
  const detail::OperationResends resends(redis_); // (one budget for all the steps)
  const std::size_t n = transactions.size();
  std::vector<std::optional<BatchResult<Decision>>> results(n);
  const auto half = [&](const Error& e, std::size_t i) {
    return half_decided(e, transactions[i]->id);
  };
  // One home record call per transaction of `of`: `step` reads its reply; an error of the step,
  // or of the pipeline as a whole, is that transaction's result (through `wrap`). Returns the
  // transactions whose step gave no result.
  const auto at_homes = [&](const std::vector<std::size_t>& of, auto&& args_of, auto&& step,
                            auto&& wrap) {
    std::vector<std::size_t> going_on;
    if (of.empty()) {
      return going_on;
    }
    std::vector<ScriptCall> calls;
    calls.reserve(of.size());
    for (const std::size_t i : of) {
      calls.push_back({&scripts::transaction_home,
                       {keys_.transaction(transactions[i]->id)},
                       args_of(i),
                       Resend::same_id});
    }
    std::vector<Reply> replies;
    std::vector<std::optional<Error>> refusals;
    try {
      replies = redis_.eval_pipeline(calls, refusals);
    } catch (const Error& e) {
      for (const std::size_t i : of) {
        results[i] = wrap(e, i);
      }
      return going_on;
    }
    for (std::size_t k = 0; k < of.size(); ++k) {
      if (refusals[k]) { // (not sent: at a begin, the failure policy may decide, as alone)
        results[of[k]] = wrap(*refusals[k], of[k]);
        continue;
      }
      try {
        if (std::optional<Decision> decision = step(of[k], home_reply(replies[k]))) {
          results[of[k]] = std::move(*decision);
        } else {
          going_on.push_back(of[k]);
        }
      } catch (const Error& e) {
        results[of[k]] = wrap(e, of[k]);
      }
    }
    return going_on;
  };

  // 1. Begin at each home record. The home record compares one value: the shares'
  // fingerprint and the amount together; it expires `share_record_margin` before the latest of
  // its shares' records.
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) {
    all[i] = i;
  }
  const std::vector<std::size_t> begun = at_homes(
      all,
      [&](std::size_t i) {
        long long latest = 0;
        for (const ScriptCall& share : prepared[i]->shares) {
          latest = std::max(latest, std::stoll(detail::decide_record_expiry(share.args)));
        }
        const auto margin = std::chrono::milliseconds(detail::share_record_margin).count();
        std::vector<std::string> args{"begin", home_fingerprint(*prepared[i]),
                                      joined_lines(prepared[i]->share_tags),
                                      std::to_string(latest - margin)};
        if (op == "reserve") {
          args.push_back(prepared[i]->home_hold_expiry); // (kept from the first begin)
        }
        return args;
      },
      [&](std::size_t i, const Reply& begun_reply) {
        return after_begin(*transactions[i], *prepared[i], begun_reply);
      },
      [](const Error& e, std::size_t) { return e; });

  // 2. Each begun transaction's shares.
  std::vector<const std::vector<ScriptCall>*> shares_of;
  shares_of.reserve(begun.size());
  for (const std::size_t i : begun) {
    shares_of.push_back(&prepared[i]->shares);
  }
  std::vector<BatchResult<std::vector<Reply>>> share_replies =
      run_shares(redis_, op == "consume", shares_of);
  std::vector<std::optional<SharesDecided>> decided(n);
  std::vector<std::size_t> deciding;
  for (std::size_t k = 0; k < begun.size(); ++k) {
    const std::size_t i = begun[k];
    try {
      decided[i] = after_shares(op, *transactions[i], *prepared[i],
                                detail::value_or_throw(std::move(share_replies[k])));
      if (decided[i]->abandoned) {
        results[i] = std::move(*decided[i]->abandoned);
      } else {
        deciding.push_back(i);
      }
    } catch (const Error& e) {
      results[i] = half(e, i);
    }
  }

  // 3. Finish at each home record: its compare-and-set makes the decision final.
  at_homes(
      deciding,
      [&](std::size_t i) {
        const Decision& combined = decided[i]->combined;
        return std::vector<std::string>{"finish",
                                        home_fingerprint(*prepared[i]),
                                        combined.state,
                                        detail::encode_stored_decision(combined),
                                        prepared[i]->home_hold_expiry,
                                        decided[i]->replayed_share ? "1" : "0"};
      },
      [&](std::size_t i, const Reply& finished) -> std::optional<Decision> {
        return after_finish(*transactions[i], *decided[i], finished);
      },
      half);

  std::vector<BatchResult<Decision>> out;
  out.reserve(n);
  for (auto& result : results) {
    out.push_back(std::move(*result));
  }
  return out;
}

std::optional<Decision> LimitCounter::after_begin(const Transaction& transaction,
                                                  const PreparedDecision& prepared,
                                                  const Reply& begun) {
  const std::string& status = begun.at(0).as_string();
  if (status == "conflict") {
    throw detail::reused_id(transaction.id);
  }
  if (status == "cancelled") {
    Decision decision;
    decision.verdict = Decision::Verdict::cancelled;
    decision.replayed = true;
    decision.state = "cancelled";
    return decision;
  }
  if (status == "final") {
    return replay_home(transaction, begun);
  }
  if (status != "go") {
    throw Error(errc::protocol_error,
                "transaction_home begin: unexpected reply " + begun.debug_string(),
                Outcome::unknown);
  }
  if (begun.at(1).as_string() != joined_lines(prepared.share_tags)) {
    throw Error(errc::conflict,
                "the rules changed while " + quoted_id(transaction.id) +
                    " was being decided by another caller: retry it",
                Outcome::failed);
  }
  return std::nullopt;
}

LimitCounter::SharesDecided LimitCounter::after_shares(std::string_view op,
                                                       const Transaction& transaction,
                                                       const PreparedDecision& prepared,
                                                       const std::vector<Reply>& replies) {
  SharesDecided decided;
  Decision& combined = decided.combined;
  std::optional<Error> share_error;
  bool voided_share = false;
  for (std::size_t i = 0; i < replies.size(); ++i) {
    try {
      const Decision part = finish_decide(op, transaction, prepared.shapes[i], replies[i]);
      decided.replayed_share = decided.replayed_share || part.replayed;
      voided_share = voided_share || (part.replayed && part.state == "voided");
      combined.rules.insert(combined.rules.end(), part.rules.begin(), part.rules.end());
      if (part.allowed() && part.state != "voided") {
        decided.counted.push_back(prepared.shares[i].keys.front());
      } else if (!combined.denial) {
        combined.verdict = Decision::Verdict::denied;
        combined.denial = part.denial;
      }
    } catch (const Error& e) {
      share_error = share_error.value_or(e);
    }
  }
  if (share_error && !share_error->is_input_error()) {
    // A share did not answer: the home record stays pending and the shares that ran keep what
    // they took; the same id again replays them and runs the rest.
    throw *share_error;
  }
  if (share_error || (!combined.allowed() && !combined.denial)) {
    // Nothing to decide on (a conflict, an overflow, a share voided long ago): give back what
    // moved and leave the home record pending.
    run_on_shares(decided.counted, {detail::void_share(Clock::now(), options_.replay_horizon)});
    if (voided_share && !share_error) {
      // A share decided after the sweep abandoned the transaction (late, or resent after its
      // reply was lost) met the void: the home record has the answer, unless it is gone too.
      const Reply home = run_home(transaction.id, {"read"});
      if (home.at(0).as_string() == "final") {
        decided.abandoned = replay_home(transaction, home);
        return decided;
      }
    }
    throw share_error.value_or(
        Error(errc::conflict,
              quoted_id(transaction.id) + " was voided before and its home record is gone",
              Outcome::failed));
  }
  combined.state = !combined.allowed() ? "denied" : op == "reserve" ? "reserved" : "consumed";
  return decided;
}

Decision LimitCounter::after_finish(const Transaction& transaction, const SharesDecided& decided,
                                    const Reply& finished) {
  const std::string& status = finished.at(0).as_string();
  if (status == "final") {
    return replay_home(transaction, finished);
  }
  if (status != "first") {
    throw Error(errc::protocol_error,
                "transaction_home finish of " + quoted_id(transaction.id) + ": unexpected reply " +
                    finished.debug_string(),
                Outcome::unknown);
  }
  if (!decided.combined.allowed()) {
    void_shares(transaction, decided.counted);
  }
  return decided.combined;
}

// The home record's decision again: its verdict and denial, and no rules (the home record keeps
// no counter's totals, and reading the shares' counters would cost a round trip per slot). A
// denied transaction's shares are voided once more: a void that an earlier caller could not
// finish is finished by any later one.
Decision LimitCounter::replay_home(const Transaction& transaction, const Reply& final_reply) {
  Decision decision =
      detail::decode_stored_decision(final_reply.at(1).as_string(), final_reply.at(2).as_string(),
                                     transaction.id, transaction.amount);
  decision.replayed = true;
  if (!decision.allowed()) {
    void_shares(transaction, share_records(transaction.id, final_reply.at(3).as_string()));
  }
  return decision;
}

// A share record that says "voided" belongs to a transaction decided over several slots (under
// the rules of its first call): its home record has the decision.
Decision LimitCounter::replay_voided(const Transaction& transaction) {
  const Reply home = run_home(transaction.id, {"read"});
  if (home.at(0).as_string() != "final") {
    throw Error(errc::conflict,
                quoted_id(transaction.id) + " was voided and its home record is " +
                    home.at(0).as_string() + ": retry it later",
                Outcome::failed);
  }
  return replay_home(transaction, home);
}

// Gives back what a denied transaction's shares took. The denial is final at the home record
// whatever happens here; a void that fails is thrown as Outcome::unknown, so that the host
// sends the id again, which replays the denial and finishes the voids (never an allow).
void LimitCounter::void_shares(const Transaction& transaction,
                               const std::vector<std::string>& shares) {
  try {
    run_on_shares(shares, {detail::void_share(Clock::now(), options_.replay_horizon)});
  } catch (const Error& e) {
    throw Error(static_cast<errc>(e.code().value()),
                quoted_id(transaction.id) + " is denied, but not every share gave back what it " +
                    "took yet (" + e.what() + "): send it again to finish",
                Outcome::unknown);
  }
}

// What each share runs to follow its home record's answer `home` to `args`. Every share is
// first brought to the home record's state, so that operations racing each other's fan-outs
// (a refund overtaking the confirm it follows) reach every share in the same order. A share
// follows a confirm its home record made even if its own hold has run out ("now" 0), and an
// expiry its home record decided even if its own hold has not.
std::vector<std::vector<std::string>>
LimitCounter::share_operations(const std::vector<std::string>& args, const Reply& home) {
  const std::string& op = args.front();
  const std::string& status = home.at(0).as_string();
  if (status == "expired") { // (a confirm or a cancel that found the hold run out)
    return {detail::expire_share()};
  }
  if (op == "confirm") {
    return {{"confirm", home.at(status == "already" ? 2 : 1).as_string(), "0"}};
  }
  if (op == "cancel") {
    std::vector<std::string> probe = args; // a share without a record needs no tombstone
    probe.emplace_back("probe");
    return {probe};
  }
  // a refund of a confirmed reservation: the confirm first, at the home record's amount
  return {{"confirm", home.at(3).as_string(), "0"}, args};
}

namespace {

// A confirmed transaction (a confirm, or a refund following one) whose share had released its
// hold as expired before it followed: the shapes disagree for good. The home record's decision
// stands (Outcome::unknown: it ran), and every retry says the same, as the sweep does.
void throw_if_lost_hold(const std::string& transaction_id, const std::vector<std::string>& plan,
                        const std::vector<Reply>& replies) {
  const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
  for (std::size_t i = 0; i < replies.size(); ++i) {
    if (detail::lost_hold(replies[i])) {
      throw Error(errc::conflict,
                  quoted_id(transaction_id) + " is confirmed at its home record, but its share " +
                      plan[i / per_share] +
                      " had released its hold as expired before it followed: that share's " +
                      "counters do not count it (correct them with adjust)",
                  Outcome::unknown);
    }
  }
}

} // namespace

Reply LimitCounter::run_transition(const std::string& transaction_id,
                                   const std::vector<std::string>& args,
                                   const Transaction* original) {
  const std::string& op = args.front();
  const detail::OperationResends resends(redis_); // (one budget for all the steps)
  if (redis_.is_cluster()) {
    std::vector<ScriptCall> refunds_with_original;
    bool home_record = true;
    if (original != nullptr) {
      const Reply checked =
          check_original_at_home(transaction_id, args, *original, refunds_with_original);
      const std::string& status = checked.at(0).as_string();
      if (status == "mismatch") {
        return checked;
      }
      home_record = status == "adopted" || status == "exists";
    }
    if (home_record) {
      Reply home = run_home(transaction_id, args);
      const std::string& status = home.at(0).as_string();
      if (status != "missing") {
        follow_home_change(transaction_id, args, home, refunds_with_original);
        return home;
      }
      // (else the home key holds a lua/limit.lua record, or nothing: then a cancel without the
      // original wrote its tombstone)
    }
  }
  // A lua/limit.lua record: standalone, or on a cluster one of a transaction without window
  // rules, a tombstone, or with the original, the record of one past its horizon.
  std::vector<std::string> keys{keys_.transaction(transaction_id)};
  if (original == nullptr) {
    return detail::eval_declaring(redis_,
                                  {&scripts::limit, std::move(keys), args, Resend::same_id});
  }
  std::vector<std::string> with_original = args;
  std::shared_ptr<const RulesInForce> in_force;
  std::vector<const Rule*> window_rules = original_window_rules(op, *original, in_force);
  if (redis_.is_cluster()) {
    // A reservation's hold never outlives its home record, and a refund with window rules was
    // recorded at the home record: the record here moves no counter.
    window_rules.clear();
  }
  std::string counter_set = append_original_args(with_original, *original, window_rules, keys[0]);
  if (!counter_set.empty()) {
    keys.push_back(std::move(counter_set));
  }
  return detail::eval_declaring(
      redis_, {&scripts::limit, std::move(keys), std::move(with_original), Resend::same_id});
}

void LimitCounter::follow_home_change(const std::string& transaction_id,
                                      const std::vector<std::string>& args, const Reply& home,
                                      const std::vector<ScriptCall>& refunds_with_original) {
  const std::string& op = args.front();
  const std::string& status = home.at(0).as_string();
  const bool applies = status == "confirmed" || status == "already" || status == "expired" ||
                       status == "cancelled" || status == "refunded";
  if (!applies) {
    return;
  }
  const std::vector<std::string> plan =
      share_records(transaction_id, home.as_array().back().as_string());
  std::vector<Reply> replies;
  try {
    replies = run_on_shares(plan, share_operations(args, home), refunds_with_original);
  } catch (const Error& e) {
    throw Error(static_cast<errc>(e.code().value()),
                op + " of " + quoted_id(transaction_id) +
                    " is decided at its home record, but not every share followed yet (" +
                    e.what() + "): retry it",
                Outcome::unknown);
  }
  if (status != "expired" && op != "cancel") {
    throw_if_lost_hold(transaction_id, plan, replies);
  }
  if (refunds_with_original.empty()) {
    if (op == "refund") {
      // A share without a record under a home record that lives: the home record was recorded
      // anew past the horizon (adopt) by a refund with the original whose shares are not yet
      // recorded anew. This refund is decided at the home record, but only a refund with the
      // original can give back there: not "refunded" until it has.
      const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
      for (std::size_t i = per_share - 1; i < replies.size(); i += per_share) {
        if (replies[i].at(0).as_string() == "unknown") {
          throw Error(errc::not_found,
                      "refund of " + quoted_id(transaction_id) +
                          " is decided at its home record, but its share " + plan[i / per_share] +
                          " has no record (past the replay horizon): retry it with the "
                          "original transaction",
                      Outcome::unknown);
        }
      }
    }
    return;
  }
  // past the horizon, every share gives back its part (recorded anew from the original)
  const std::size_t per_share = replies.size() / std::max<std::size_t>(plan.size(), 1);
  for (std::size_t i = per_share - 1; i < replies.size(); i += per_share) {
    if (replies[i].at(0).as_string() != "refunded") {
      throw Error(errc::conflict,
                  "refund of " + quoted_id(transaction_id) +
                      " is decided at its home record, but its share " + plan[i / per_share] +
                      " answered " + replies[i].debug_string() +
                      " (its record is gone and the rules in force put its counters elsewhere): "
                      "correct its counters with adjust",
                  Outcome::unknown);
    }
  }
}

// With the original a host kept: its home record, if there is one, must be of that transaction
// (lua/transaction_home.lua, op adopt). A refund of one whose home record is gone (past the
// replay horizon) records it anew as consumed, under the shares the original has under the
// rules in force, and fills `refunds_with_original` with each share's refund that records its
// share anew from the original if its record is gone too. A retry with the same original
// replays each step. Reply: adopt's, or {"none"} (no home record: a confirm or cancel answers
// as lua/limit.lua does with the original) or {"missing"} (a lua/limit.lua record is there).
Reply LimitCounter::check_original_at_home(const std::string& transaction_id,
                                           const std::vector<std::string>& args,
                                           const Transaction& original,
                                           std::vector<ScriptCall>& refunds_with_original) {
  const std::string& op = args.front();
  // A share's record must not expire before its home record, or a retry replayed at the home
  // record gives back again in the share: the shares' records (append_original_args) are taken
  // later and live `share_record_margin` longer.
  const std::string home_expiry =
      std::to_string(detail::unix_millis(Clock::now() + options_.replay_horizon));
  std::shared_ptr<const RulesInForce> in_force;
  const std::vector<const Rule*> window_rules = original_window_rules(op, original, in_force);
  std::vector<std::string> tags;
  if (op == "refund") {
    for (const auto& share : detail::share_plans(keys_, original, window_rules)) {
      std::string record = keys_.transaction_share(share.tag, original.id);
      std::vector<std::string> share_args = args;
      std::string counter_set = append_original_args(share_args, original, share.rules, record);
      refunds_with_original.push_back({&scripts::limit,
                                       {std::move(record), std::move(counter_set)},
                                       std::move(share_args),
                                       Resend::same_id});
      tags.push_back(share.tag);
    }
  }
  return run_home(transaction_id,
                  {"adopt", detail::fingerprint("consume", original), joined_lines(tags),
                   home_expiry, detail::fingerprint("reserve", original),
                   std::to_string(original.amount), tags.empty() ? "compare" : "create"});
}

} // namespace limitcounter

// Redis: scripts and commands over a connection pool.
#include <limitcounter/redis.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

#include "redis/circuit_breaker.hpp"
#include "redis/cluster_protocol.hpp"
#include "redis/connection_pool.hpp"
#include "redis/key_slot.hpp"
#include "redis/operation_resends.hpp"
#include "redis/retry_policy.hpp"
#include "redis/router.hpp"
#include "redis/sentinel_master.hpp"

namespace limitcounter {
namespace {

// <command> <script> numkeys keys... args... (`aim` says which command); views into `call`,
// `numkeys` must outlive the result.
detail::Argv script_call_argv(const std::vector<std::string>& keys,
                              const std::vector<std::string>& args, const std::string& numkeys) {
  detail::Argv argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back();
  argv.emplace_back();
  argv.emplace_back(numkeys);
  for (const auto& key : keys) {
    argv.emplace_back(key);
  }
  for (const auto& arg : args) {
    argv.emplace_back(arg);
  }
  return argv;
}

// What FUNCTION LOAD of `script`'s library answered.
enum class FunctionLoad {
  loaded,       // on the server now: loaded, or before (by another connection: its name
                // carries its version)
  no_functions, // the server refuses functions (renamed away, an ACL without function|load)
  refused,      // an error of the server's state (a demoted master's READONLY, OOM, ...)
  unexpected,   // an answer no server gives
};

FunctionLoad judge_function_load(const Reply& loaded, const Script& script) {
  if (!loaded.is_error()) {
    return loaded.type() == Reply::Type::string && loaded.as_string() == script.loaded_name()
               ? FunctionLoad::loaded
               : FunctionLoad::unexpected;
  }
  if (loaded.as_string() ==
      "ERR Library '" + std::string(script.loaded_name()) + "' already exists") {
    return FunctionLoad::loaded;
  }
  return detail::refuses_functions(loaded.as_string()) ? FunctionLoad::no_functions
                                                       : FunctionLoad::refused;
}

// Loads `script` on the connection's server with SCRIPT LOAD; the server must name the same
// SHA1 we embedded.
void load_script_source(detail::Connection& connection, const Script& script) {
  const Reply reply = connection.run({"SCRIPT", "LOAD", script.source});
  if (reply.is_error()) {
    throw Error(errc::server_error,
                "SCRIPT LOAD of " + std::string(script.name) + " on " + connection.peer() + ": " +
                    reply.as_string(),
                Outcome::failed);
  }
  if (reply.as_string() != script.sha1) {
    throw Error(errc::protocol_error,
                "SCRIPT LOAD of " + std::string(script.name) + " returned " + reply.as_string() +
                    ", not the embedded SHA1 " + std::string(script.sha1),
                Outcome::failed);
  }
}

// The failures a node's breaker counts: the node is unreachable, stalled or broke the
// connection. (A node still refusing when the budget ran out is counted where that is seen.)
bool is_infrastructure_failure(const Error& e) {
  return e.code() == errc::connect_failed || e.code() == errc::timeout ||
         e.code() == errc::io_error;
}

} // namespace

// The I/O orchestration of a call: which pool to take a connection from (the router's slot
// map), sending, and acting on the replies as the retry policy says, within the call's budget.
class Redis::Impl {
public:
  explicit Impl(RedisOptions options)
      : options_(std::move(options)), cluster_(!options_.cluster_seeds.empty()),
        budget_(options_.call_budget.count() > 0 ? options_.call_budget
                                                 : options_.command_timeout) {
    if (options_.pool_size == 0) {
      throw Error(errc::invalid_argument, "Redis pool_size must be at least 1");
    }
    // No "0 means wait forever": a payment call must never hang on a dead server.
    if (options_.connect_timeout.count() <= 0 || options_.command_timeout.count() <= 0) {
      throw Error(errc::invalid_argument,
                  "Redis connect_timeout and command_timeout must be positive (got " +
                      std::to_string(options_.connect_timeout.count()) + " ms and " +
                      std::to_string(options_.command_timeout.count()) + " ms)");
    }
    if (options_.retry.max_attempts < 1 || options_.retry.budget.count() < 0 ||
        options_.retry.backoff.count() < 0) {
      throw Error(errc::invalid_argument,
                  "Redis retry max_attempts must be at least 1 and its budget and backoff not "
                  "negative (got " +
                      std::to_string(options_.retry.max_attempts) + ", " +
                      std::to_string(options_.retry.budget.count()) + " ms and " +
                      std::to_string(options_.retry.backoff.count()) + " ms)");
    }
    if (options_.pool_wait_timeout.count() < 0 || options_.call_budget.count() < 0 ||
        options_.sentinel_recheck.count() < 0) {
      throw Error(errc::invalid_argument,
                  "Redis pool_wait_timeout, call_budget and sentinel_recheck must not be negative "
                  "(got " +
                      std::to_string(options_.pool_wait_timeout.count()) + " ms, " +
                      std::to_string(options_.call_budget.count()) + " ms and " +
                      std::to_string(options_.sentinel_recheck.count()) + " ms)");
    }
    detail::check_sentinel_options(options_);
    if (options_.cluster_seeds.empty() && options_.sentinels.empty() &&
        options_.unix_socket.empty() &&
        (options_.port < 1 || options_.port > 65535 || options_.host.empty())) {
      throw Error(errc::invalid_argument,
                  "Redis host must be set and port be from 1 to 65535 (got " +
                      std::to_string(options_.port) + ")");
    }
    if (options_.db < 0) {
      throw Error(errc::invalid_argument,
                  "Redis db must not be negative (got " + std::to_string(options_.db) + ")");
    }
    if (cluster_) {
      // Every seed is checked now, not when the first slot map is read mid-call.
      for (const auto& seed : options_.cluster_seeds) {
        node_locked(detail::parse_seed(seed));
      }
      peer_ = "cluster " + options_.cluster_seeds.front();
    } else if (!options_.sentinels.empty()) {
      sentinel_ = std::make_unique<detail::SentinelMaster>(options_);
      peer_ = sentinel_->description();
    } else {
      peer_ = options_.unix_socket.empty() ? options_.host + ":" + std::to_string(options_.port)
                                           : options_.unix_socket;
      standalone_ = std::make_unique<detail::ConnectionPool>(
          options_, options_.unix_socket.empty() ? options_.host : std::string(), options_.port);
    }
  }

  /// One call: its retry budget, and the breakers of the nodes it goes to, which learn how
  /// their node did when the call ends.
  struct Call {
    detail::RetryPolicy policy;
    detail::BreakerTrail breakers;
  };

  Reply command(const std::vector<std::string>& argv, Call& call) {
    const detail::Argv views(argv.begin(), argv.end());
    const auto key = detail::routing_key(argv);
    const int slot = key ? detail::key_slot(*key) : no_slot;
    return routed(slot, call,
                  [&](detail::Connection& connection) { return connection.run(views); });
  }

  std::vector<std::pair<std::string, Reply>> on_masters(const std::vector<std::string>& argv,
                                                        Call& call) {
    const detail::Argv views(argv.begin(), argv.end());
    const auto run = [&](detail::Connection& connection) { return connection.run(views); };
    std::vector<std::pair<std::string, Reply>> replies;
    if (!cluster_) {
      replies.emplace_back(peer_, routed(no_slot, call, run));
      return replies;
    }
    bool stale = false;
    {
      const std::lock_guard<std::mutex> lock(nodes_mutex_);
      stale = slot_map_.stale(Clock::now());
    }
    if (stale) {
      refresh_slots(call.policy);
    }
    std::vector<std::pair<std::string, int>> masters; // (address, one slot it serves)
    {
      const std::lock_guard<std::mutex> lock(nodes_mutex_);
      for (const int slot : slot_map_.one_slot_per_node()) {
        const detail::Endpoint& node = slot_map_.node(*slot_map_.owner(slot));
        masters.emplace_back(node.host + ":" + std::to_string(node.port), slot);
      }
    }
    for (const auto& [address, slot] : masters) {
      replies.emplace_back(address, routed(slot, call, run));
    }
    return replies;
  }

  Reply eval(const Script& script, const std::vector<std::string>& keys,
             const std::vector<std::string>& args, Call& call) {
    Reply reply = routed(slot_of(keys, script), call, [&](detail::Connection& connection) {
      return run_script(
          connection, script,
          [&] {
            const auto [command, name] = script_command(script);
            return connection.run_script_call(command, name, keys, args);
          },
          call.policy);
    });
    if (reply.is_error()) {
      // a NOSCRIPT left after the budget (no time to load the script) did not run
      const bool ran = detail::classify(reply, false) != detail::ReplyKind::noscript;
      throw Error(errc::server_error,
                  "script " + std::string(script.name) + " on " + peer_ + ": " + reply.as_string(),
                  ran ? Outcome::failed : Outcome::not_sent);
    }
    return reply;
  }

  // `refusals`: if not null, gets the Error of each call that did not run or whose reply was
  // lost, and a node whose breaker is open or whose connection failed refuses or fails only its
  // own calls (see `Redis::eval_pipeline`).
  std::vector<Reply> eval_pipeline(const std::vector<ScriptCall>& calls, Call& call,
                                   std::vector<std::optional<Error>>* refusals = nullptr) {
    detail::RetryPolicy& policy = call.policy;
    std::vector<std::string> numkeys;
    numkeys.reserve(calls.size());
    std::vector<detail::Argv> commands;
    commands.reserve(calls.size());
    std::vector<int> slots;
    slots.reserve(calls.size());
    for (const auto& script_call : calls) {
      if (script_call.script == nullptr) {
        throw Error(errc::invalid_argument, "a pipelined ScriptCall has no script");
      }
      slots.push_back(slot_of(script_call.keys, *script_call.script));
      numkeys.push_back(std::to_string(script_call.keys.size()));
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      commands.push_back(script_call_argv(calls[i].keys, calls[i].args, numkeys[i]));
      aim(commands[i], *calls[i].script);
    }
    // One pipeline per node. Calls that come back NOSCRIPT did not run: each node loads
    // the missing scripts and runs just those calls again in a second pipeline. Calls
    // redirected or asked to wait did not run either, and go through the router one by one.
    std::vector<Reply> replies(calls.size());
    // Call i on its own through the router (redirects, a gone node, NOSCRIPT).
    const auto route_alone = [&](std::size_t i) {
      return routed(slots[i], call, [&](detail::Connection& connection) {
        return run_script(
            connection, *calls[i].script,
            [&] {
              aim(commands[i], *calls[i].script); // (FCALL refused before: EVALSHA)
              return connection.run(commands[i]);
            },
            policy);
      });
    };
    // A call still refused when the budget ends keeps its error reply in place: it did not
    // run, and the calls that did run keep their replies. Only when none ran is the
    // pipeline refused as a whole (not sent; a failure for the breaker).
    // A call redirected to a node whose breaker is open, or to a node that cannot be reached,
    // did not run either, and is kept the same way.
    std::optional<Error> unavailable;
    std::vector<bool> refused(calls.size(), false);
    if (refusals != nullptr) {
      refusals->assign(calls.size(), std::nullopt);
    }
    const auto keep_refused = [&](std::size_t i, const Error& e) {
      unavailable = e;
      refused[i] = true;
      if (!replies[i].is_error()) { // (a refusal the node gave stays as it gave it)
        replies[i] = Reply::error(e.what());
      }
      if (refusals != nullptr) {
        (*refusals)[i] = e;
      }
    };
    // A call whose slot no node serves (the map read anew says so) is refused before anything
    // is sent: with `refusals` in place, the other calls go on. The map is read anew for that
    // once a pipeline, not once per such call.
    std::vector<detail::ConnectionPool*> node_of(calls.size());
    std::map<detail::ConnectionPool*, std::vector<std::size_t>> by_node;
    bool unserved_slot_seen = false;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      try {
        node_of[i] = &owner(slots[i], policy, !unserved_slot_seen);
      } catch (const Error& e) {
        if (refusals == nullptr || e.code() != errc::cluster_down) {
          throw;
        }
        unserved_slot_seen = true;
        keep_refused(i, e);
        continue;
      }
      by_node[node_of[i]].push_back(i);
    }
    // With `refusals`, a call whose reply was lost (it may have run) keeps that error, and the
    // other nodes' calls go on (without, the whole call throws it).
    std::optional<Error> lost;
    const auto keep_lost = [&](std::size_t i, const Error& e) {
      lost = e;
      refused[i] = true; // (not classified below)
      replies[i] = Reply::error(e.what());
      (*refusals)[i] = e;
    };
    // Every node's breaker is asked before anything is sent: a pipeline that needs a node
    // whose breaker is open throws circuit_open having sent nothing anywhere, so the whole
    // batch is "not sent", as when a connection cannot be made; with `refusals`, only that
    // node's calls are refused.
    std::set<detail::ConnectionPool*> breaker_open;
    for (const auto& [pool, indexes] : by_node) {
      try {
        enter(*pool, call);
      } catch (const Error& e) {
        if (refusals == nullptr) {
          throw;
        }
        breaker_open.insert(pool);
        for (const std::size_t i : indexes) {
          keep_refused(i, e);
        }
      }
    }
    // Call i alone through the router; false when it did not run (its refusal kept in place).
    const auto route_or_keep_refused = [&](std::size_t i) {
      try {
        replies[i] = route_alone(i);
        return true;
      } catch (const Error& e) {
        if (!detail::did_not_run(e)) {
          if (refusals == nullptr) {
            throw;
          }
          keep_lost(i, e);
          return false;
        }
        keep_refused(i, e);
        return false;
      }
    };
    for (const auto& [pool, indexes] : by_node) {
      if (breaker_open.count(pool) != 0) {
        continue;
      }
      try {
        run_on_node(*pool, commands, indexes, replies, call);
      } catch (const Error& e) {
        if (!detail::did_not_run(e)) {
          if (refusals == nullptr) {
            throw;
          }
          for (const std::size_t i : indexes) {
            keep_lost(i, e);
          }
          continue;
        }
        // Nothing reached this node (a failover?): as for one call, learn the map again and
        // send its calls to their slots' owners now, one by one through the router, rather
        // than fail every pipeline that needs a gone node until the map goes stale.
        bool reroute =
            cluster_ && e.code() == errc::connect_failed && policy.after_hop(Clock::now());
        if (reroute) {
          try {
            refresh_slots(policy);
          } catch (const Error&) {
            reroute = false; // (it only reads: the node's calls stay refused)
          }
        }
        for (const std::size_t i : indexes) {
          if (!reroute) {
            keep_refused(i, e);
            continue;
          }
          route_or_keep_refused(i);
        }
        continue;
      }
      if (policy.may_resend(Clock::now())) {
        try {
          rerun_noscript_on_node(*pool, calls, commands, indexes, replies, call);
        } catch (const Error& e) {
          // The other calls of this node (and of the nodes before) ran: only the calls that
          // were answered NOSCRIPT fail, as not run (nothing of the rerun was sent) or lost.
          if (!detail::did_not_run(e) && refusals == nullptr) {
            throw;
          }
          for (const std::size_t i : indexes) {
            if (detail::classify(replies[i], false) != detail::ReplyKind::noscript) {
              continue;
            }
            if (detail::did_not_run(e)) {
              keep_refused(i, e);
            } else {
              keep_lost(i, e);
            }
          }
        }
      }
    }
    bool any_ran = false;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (refused[i]) {
        continue;
      }
      const detail::ReplyKind kind = detail::classify(replies[i], cluster_);
      if (kind == detail::ReplyKind::transient || kind == detail::ReplyKind::redirect ||
          demoted(replies[i])) {
        if (!policy.may_resend(Clock::now())) {
          call.breakers.failed(node_of[i]->breaker());
          keep_refused(
              i, detail::ServerUnavailable(cluster_ ? errc::cluster_down : errc::server_error,
                                           refused_message(replies[i], policy), Outcome::not_sent));
          continue;
        }
        if (!route_or_keep_refused(i)) {
          continue;
        }
      }
      any_ran = any_ran || (detail::classify(replies[i], cluster_) == detail::ReplyKind::final &&
                            !demoted(replies[i]));
    }
    if (lost && !any_ran) {
      throw *lost; // (some calls may have run)
    }
    if (unavailable && !any_ran) {
      throw *unavailable;
    }
    return replies;
  }

  const RedisOptions& options() const noexcept { return options_; }

  /// Runs `run` as one call, and again after a lost reply when `resend` allows (see "Lost
  /// replies" at `Redis`).
  template <typename Run>
  auto resending(Resend resend, Run&& run) -> decltype(run(std::declval<Call&>())) {
    if (resend == Resend::never || options_.retry.max_attempts <= 1) {
      return guarded(run);
    }
    std::optional<detail::ResendPolicy> own;
    std::optional<Error> lost;
    return resending(resend_policy(own), lost, run);
  }

  /// `eval_pipeline` with the resends of "Lost replies": the whole pipeline when it threw a lost
  /// reply and every call is Resend::same_id; with `refusals`, then the same_id calls whose
  /// reply was lost, in one pipeline per resend, within the one budget of the whole call.
  std::vector<Reply> resending_pipeline(const std::vector<ScriptCall>& calls,
                                        std::vector<std::optional<Error>>* refusals) {
    const auto by_id = [](const ScriptCall& c) { return c.resend == Resend::same_id; };
    if (options_.retry.max_attempts <= 1 || std::none_of(calls.begin(), calls.end(), by_id)) {
      return guarded([&](Call& call) { return eval_pipeline(calls, call, refusals); });
    }
    std::optional<detail::ResendPolicy> own;
    detail::ResendPolicy& resends = resend_policy(own);
    std::optional<Error> lost;
    const auto whole = [&](Call& call) { return eval_pipeline(calls, call, refusals); };
    std::vector<Reply> replies = std::all_of(calls.begin(), calls.end(), by_id)
                                     ? resending(resends, lost, whole)
                                     : guarded(whole);
    if (refusals == nullptr) {
      return replies;
    }
    for (;;) {
      std::vector<std::size_t> again;
      for (std::size_t i = 0; i < calls.size(); ++i) {
        const auto& refusal = (*refusals)[i];
        if (refusal && refusal->outcome() == Outcome::unknown && by_id(calls[i])) {
          again.push_back(i);
        }
      }
      if (again.empty()) {
        return replies;
      }
      if (!lost) {
        lost = (*refusals)[again.front()];
      }
      std::vector<ScriptCall> subset;
      subset.reserve(again.size());
      for (const std::size_t i : again) {
        subset.push_back(calls[i]);
      }
      std::vector<std::optional<Error>> subset_refusals;
      std::vector<Reply> subset_replies;
      try {
        subset_replies = resending(resends, lost, [&](Call& call) {
          return eval_pipeline(subset, call, &subset_refusals);
        });
      } catch (const Error& e) { // spent: each keeps Outcome::unknown, with the whole story
        for (const std::size_t i : again) {
          (*refusals)[i] = e;
          replies[i] = Reply::error(e.what());
        }
        return replies;
      }
      // A resend that did not run leaves its call's lost reply in place (the first send may
      // have run), and it is sent again while the budget lasts.
      for (std::size_t j = 0; j < again.size(); ++j) {
        if (!subset_refusals[j]) {
          replies[again[j]] = std::move(subset_replies[j]);
          (*refusals)[again[j]].reset();
        }
      }
    }
  }

  /// Runs `run` as one call with a fresh retry budget. Each node it goes to is guarded by
  /// that node's breaker (see `enter`), which learns how its node did when the call ends.
  template <typename Run> auto guarded(Run&& run) -> decltype(run(std::declval<Call&>())) {
    Call call{detail::RetryPolicy(budget_, Clock::now()), {}};
    return run(call); // call.breakers settles as the call ends, by return or by throw
  }

private:
  using Clock = detail::RetryPolicy::Clock;
  static constexpr int no_slot = -1; ///< a call without keys: any node will do

  // The resends of a call: its operation's (detail::OperationResends) or, alone, `own`'s.
  detail::ResendPolicy& resend_policy(std::optional<detail::ResendPolicy>& own) const {
    if (detail::ResendPolicy* shared = detail::OperationResends::of(options_)) {
      return *shared;
    }
    return own.emplace(options_.retry, Clock::now());
  }

  // Sends `run` (a call idempotent by id) until a reply comes: after a lost reply (kept in
  // `lost`, which may be set on entry: then the first send is already a resend), a send that
  // did not run or lost its reply again leads to the next one, after the back-off. Spent, or
  // an error reply to a resend, throws Outcome::unknown: the first send may have run.
  template <typename Run>
  auto resending(detail::ResendPolicy& resends, std::optional<Error>& lost, Run&& run)
      -> decltype(run(std::declval<Call&>())) {
    std::optional<Error> last = lost;
    for (;;) {
      if (lost) {
        const auto pause = resends.after_lost(Clock::now(), jitter());
        if (!pause) {
          throw still_unknown(*lost, *last, resends);
        }
        std::this_thread::sleep_for(*pause);
      }
      try {
        return guarded(run);
      } catch (const Error& e) {
        if (!lost && e.outcome() != Outcome::unknown) {
          throw; // nothing lost yet: as without resends
        }
        if (!lost) {
          lost = e;
        }
        last = e;
        if (e.outcome() == Outcome::failed) {
          throw still_unknown(*lost, e, resends);
        }
      }
    }
  }

  // The error of a call whose resends did not settle it: the first lost reply's code, still
  // Outcome::unknown, and what the last send met.
  Error still_unknown(const Error& lost, const Error& last,
                      const detail::ResendPolicy& resends) const {
    if (resends.sends() == 1) {
      return lost;
    }
    return Error(static_cast<errc>(lost.code().value()),
                 std::string(lost.what()) + "; sent " + std::to_string(resends.sends()) +
                     " times within the retry budget of " +
                     std::to_string(resends.budget().count()) + " ms, the last: " + last.what() +
                     "; it may have run: retry with the same id",
                 Outcome::unknown);
  }

  // Spreads the resends of callers that lost their replies at once (one stall, many callers).
  static double jitter() {
    thread_local std::minstd_rand generator{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(generator);
  }

  // Lets `call` use `pool`'s node unless that node's breaker is open; throws circuit_open
  // (not sent) then. Only the calls that need a stalled node fail fast.
  void enter(detail::ConnectionPool& pool, Call& call) const {
    if (!call.breakers.enter(pool.breaker())) {
      throw Error(errc::circuit_open,
                  "Redis at " + pool.peer() + " failed " +
                      std::to_string(options_.breaker_failures) +
                      " times in a row; calls that need it fail fast for " +
                      std::to_string(options_.breaker_pause.count()) + " ms before a probe",
                  Outcome::not_sent);
    }
  }

  // on_connection behind `pool`'s breaker: tells the call's trail whether the node answered
  // (any reply, an error reply too) or failed. An error without an answer nor a failure of
  // the node (no free connection in the pool) teaches its breaker nothing.
  template <typename Send>
  auto attempt(detail::ConnectionPool& pool, Call& call, Send&& send) const
      -> decltype(send(std::declval<detail::Connection&>())) {
    enter(pool, call);
    try {
      auto result = on_connection(pool, call.policy, send);
      call.breakers.answered(pool.breaker());
      return result;
    } catch (const Error& e) {
      if (is_infrastructure_failure(e)) {
        call.breakers.failed(pool.breaker());
      } else if (e.code() != errc::pool_exhausted) {
        call.breakers.answered(pool.breaker());
      }
      if (sentinel_ && detail::calls_for_rediscovery(e)) {
        sentinel_->suspect(pool); // the next call asks the sentinels first (a failover?)
      }
      throw;
    }
  }

  // Runs `send` on a connection of `pool`. If the connection turns out to have been closed
  // by the server while it sat in the pool, and not one byte of the request left (the
  // StaleConnection case), runs it once more on another connection, budget permitting: the
  // server never saw the first attempt. Anything that fails after a byte was sent may have
  // run and is left to the caller. `send` must be safe to repeat when its last request was
  // not sent: every request before it in the chain must be free of effects (ASKING, an
  // EVALSHA answered NOSCRIPT or an FCALL answered "Function not found" or refused, SCRIPT LOAD,
  // FUNCTION LOAD: a library loaded before answers "already exists", which counts as loaded).
  // An answer NOAUTH is thrown: nothing ran.
  template <typename Send>
  static auto on_connection(detail::ConnectionPool& pool, const detail::RetryPolicy& policy,
                            Send&& send) -> decltype(send(std::declval<detail::Connection&>())) {
    for (int attempt = 1;; ++attempt) {
      auto lease = pool.acquire();
      try {
        auto replies = send(*lease);
        throw_if_noauth(replies, *lease);
        return replies;
      } catch (const detail::StaleConnection&) {
        if (attempt >= 2 || !policy.may_resend(Clock::now())) {
          throw;
        }
      }
    }
  }

  static void throw_if_noauth(const Reply& reply, const detail::Connection& connection) {
    if (detail::classify(reply, false) == detail::ReplyKind::noauth) {
      // The server's text is "Authentication required."; the password is never named.
      throw Error(errc::connect_failed,
                  "Redis at " + connection.peer() +
                      " requires authentication (it answered NOAUTH): set RedisOptions::password "
                      "(and user for an ACL user); nothing ran",
                  Outcome::not_sent);
    }
  }

  static void throw_if_noauth(const std::vector<Reply>& replies,
                              const detail::Connection& connection) {
    for (const Reply& reply : replies) {
      throw_if_noauth(reply, connection);
    }
  }

  // The calls `indexes` of one node in one pipeline; their replies go to `replies`.
  void run_on_node(detail::ConnectionPool& pool, const std::vector<detail::Argv>& commands,
                   const std::vector<std::size_t>& indexes, std::vector<Reply>& replies,
                   Call& call) const {
    std::vector<detail::Argv> batch;
    batch.reserve(indexes.size());
    for (const std::size_t i : indexes) {
      batch.push_back(commands[i]);
    }
    std::vector<Reply> answered = attempt(
        pool, call, [&](detail::Connection& connection) { return connection.run_pipeline(batch); });
    for (std::size_t j = 0; j < indexes.size(); ++j) {
      replies[indexes[j]] = std::move(answered[j]);
    }
  }

  // The calls of `indexes` that did not run for want of their script (NOSCRIPT, FCALL's
  // "Function not found", FCALL refused), again, in one pipeline that first loads each missing
  // script once: SCRIPT LOAD or FUNCTION LOAD s..., then the calls. A script the node refuses to
  // load, or loads under another SHA1 than the embedded one, leaves an error reply in place of
  // its calls (they did not run), so that the calls that did run keep their replies. A node
  // that refuses FCALL or FUNCTION LOAD turns this Redis to EVALSHA (`functions_`), and the
  // calls still missing then go once more that way.
  void rerun_noscript_on_node(detail::ConnectionPool& pool, const std::vector<ScriptCall>& calls,
                              std::vector<detail::Argv>& commands,
                              const std::vector<std::size_t>& indexes, std::vector<Reply>& replies,
                              Call& call) const {
    for (int round = 0; round < 2; ++round) {
      const bool functions_before = functions_.load();
      if (!rerun_missing_scripts(pool, calls, commands, indexes, replies, call) ||
          functions_.load() == functions_before) {
        return;
      }
    }
  }

  // One round of `rerun_noscript_on_node`; false when no call needed its script.
  bool rerun_missing_scripts(detail::ConnectionPool& pool, const std::vector<ScriptCall>& calls,
                             std::vector<detail::Argv>& commands,
                             const std::vector<std::size_t>& indexes, std::vector<Reply>& replies,
                             Call& call) const {
    std::vector<std::size_t> again;
    std::vector<const Script*> missing;
    for (const std::size_t i : indexes) {
      if (detail::classify(replies[i], false) == detail::ReplyKind::noscript) {
        if (detail::refuses_functions(replies[i].as_string())) {
          functions_.store(false);
        }
        again.push_back(i);
        const Script* script = calls[i].script;
        if (std::find_if(missing.begin(), missing.end(), [&](const Script* s) {
              return s->sha1 == script->sha1;
            }) == missing.end()) {
          missing.push_back(script);
        }
      }
    }
    if (again.empty()) {
      return false;
    }
    std::vector<detail::Argv> batch;
    batch.reserve(missing.size() + again.size());
    std::vector<bool> as_function;
    for (const Script* script : missing) {
      as_function.push_back(by_function(*script));
      batch.push_back(as_function.back() ? detail::Argv{"FUNCTION", "LOAD", script->library}
                                         : detail::Argv{"SCRIPT", "LOAD", script->source});
    }
    for (const std::size_t i : again) {
      aim(commands[i], *calls[i].script);
      batch.push_back(commands[i]);
    }
    std::vector<Reply> answered = attempt(
        pool, call, [&](detail::Connection& connection) { return connection.run_pipeline(batch); });
    std::vector<std::optional<Reply>> load_failures(missing.size());
    for (std::size_t m = 0; m < missing.size(); ++m) {
      const Reply& loaded = answered[m];
      if (as_function[m]) {
        switch (judge_function_load(loaded, *missing[m])) {
        case FunctionLoad::loaded: break;
        case FunctionLoad::no_functions:
          functions_.store(false); // (its calls answered "Function not found": sent again)
          break;
        case FunctionLoad::refused:
          // (its own error as the calls' reply: a READONLY or OOM keeps its code, so the calls
          // are treated as the server's refusal of them)
          load_failures[m] = loaded;
          break;
        case FunctionLoad::unexpected:
          load_failures[m] = Reply::error("ERR FUNCTION LOAD of " + std::string(missing[m]->name) +
                                          " returned " + loaded.debug_string());
          break;
        }
      } else if (loaded.is_error()) {
        load_failures[m] = Reply::error("ERR SCRIPT LOAD of " + std::string(missing[m]->name) +
                                        " failed: " + loaded.as_string());
      } else if (loaded.type() != Reply::Type::string || loaded.as_string() != missing[m]->sha1) {
        load_failures[m] = Reply::error("ERR SCRIPT LOAD of " + std::string(missing[m]->name) +
                                        " returned " + loaded.debug_string() +
                                        ", not the embedded SHA1 " + std::string(missing[m]->sha1));
      }
    }
    for (std::size_t j = 0; j < again.size(); ++j) {
      const std::size_t i = again[j];
      Reply& reply = answered[missing.size() + j];
      std::size_t m = 0;
      while (missing[m]->sha1 != calls[i].script->sha1) {
        ++m;
      }
      const bool still_missing = detail::classify(reply, false) == detail::ReplyKind::noscript;
      replies[i] = load_failures[m] && still_missing ? *load_failures[m] : std::move(reply);
    }
    return true;
  }

  // The script call `send` sends (FCALL or EVALSHA, as `by_function` says when it is sent) on
  // `connection`, sent again when it did not run for want of the script and the budget allows:
  // after loading it into this node (SCRIPT LOAD, or FUNCTION LOAD of its library), or by
  // EVALSHA when the server refuses FCALL or FUNCTION LOAD. Past the budget the refusal is
  // returned as it is (nothing ran).
  template <typename Send>
  Reply run_script(detail::Connection& connection, const Script& script, const Send& send,
                   const detail::RetryPolicy& policy) const {
    Reply reply = send();
    for (int round = 0;
         round < 2 && detail::classify(reply, false) == detail::ReplyKind::noscript &&
         policy.may_resend(Clock::now());
         ++round) {
      if (detail::refuses_functions(reply.as_string())) {
        functions_.store(false);
      } else if (std::optional<Reply> refused = load_script(connection, script)) {
        return *refused; // (the call did not run: READONLY, OOM, ... act on it as on the call's)
      }
      reply = send();
    }
    return reply;
  }

  // Loads `script` on the connection's server: its library where scripts run by FCALL (turning
  // this Redis to EVALSHA if the server refuses FUNCTION LOAD), else its source. Returns the
  // error reply of a FUNCTION LOAD the server would not run (a demoted master's READONLY, OOM,
  // ...): the call then gets it as its own reply, since it did not run either.
  std::optional<Reply> load_script(detail::Connection& connection, const Script& script) const {
    if (by_function(script)) {
      Reply loaded = connection.run({"FUNCTION", "LOAD", script.library});
      switch (judge_function_load(loaded, script)) {
      case FunctionLoad::loaded: return std::nullopt;
      case FunctionLoad::refused: return loaded;
      case FunctionLoad::unexpected:
        // (a single call throws, where a pipeline keeps the other calls' replies)
        throw Error(errc::protocol_error,
                    "FUNCTION LOAD of " + std::string(script.name) + " on " + connection.peer() +
                        " returned " + loaded.debug_string() + ", not " +
                        std::string(script.loaded_name()),
                    Outcome::failed);
      case FunctionLoad::no_functions: functions_.store(false); break;
      }
    }
    load_script_source(connection, script);
    return std::nullopt;
  }

  // Whether `script` is called by FCALL now: it has a library, and no server has refused
  // functions to this Redis.
  bool by_function(const Script& script) const noexcept {
    return !script.function_name.empty() && functions_.load(std::memory_order_relaxed);
  }

  // What a call of `script` is sent as now, as `by_function` says: FCALL <function> or
  // EVALSHA <sha1>.
  std::pair<std::string_view, std::string_view> script_command(const Script& script) const {
    return by_function(script) ? std::pair{std::string_view("FCALL"), script.function_name}
                               : std::pair{std::string_view("EVALSHA"), script.sha1};
  }

  // Makes `argv` (from script_call_argv) the call `script_command` says.
  void aim(detail::Argv& argv, const Script& script) const {
    std::tie(argv[0], argv[1]) = script_command(script);
  }

  // The one slot of `keys`; no_slot for no keys, and off a cluster, where one node serves
  // every key (no CRC16 of a key nobody reads). A cluster refuses keys of several slots here,
  // before anything is sent.
  int slot_of(const std::vector<std::string>& keys, const Script& script) const {
    if (keys.empty() || !cluster_) {
      return no_slot;
    }
    const std::uint16_t slot = detail::key_slot(keys.front());
    if (cluster_) {
      for (const auto& key : keys) {
        if (detail::key_slot(key) != slot) {
          throw Error(errc::cross_slot, "script " + std::string(script.name) +
                                            " would touch keys of two cluster slots: " +
                                            detail::quote_for_message(keys.front()) + " and " +
                                            detail::quote_for_message(key));
        }
      }
    }
    return slot;
  }

  // Sends through the node of `slot` and acts on replies that say the command did not run:
  // MOVED and ASK are followed, transient replies are retried after a back-off, both only
  // while the policy allows. Each node it goes to (the slot's owner, a redirect's target) is
  // guarded by that node's breaker. A template, not std::function: the callers' lambdas would
  // not fit its inline storage, and this is one heap allocation per call saved.
  template <typename Send> Reply routed(int slot, Call& call, const Send& send) {
    detail::RetryPolicy& policy = call.policy;
    detail::ConnectionPool* ask_target = nullptr;
    for (;;) {
      detail::ConnectionPool& pool = ask_target != nullptr ? *ask_target : owner(slot, policy);
      Reply reply;
      try {
        reply = attempt(pool, call, [&](detail::Connection& connection) {
          if (ask_target != nullptr) {
            connection.run({"ASKING"});
          }
          return send(connection);
        });
      } catch (const Error& e) {
        // Not sent: the node may be gone (failover). Learn the map again and retry.
        if (cluster_ && e.code() == errc::connect_failed && policy.after_hop(Clock::now())) {
          refresh_slots(policy);
          continue;
        }
        // Not sent either: the master may have moved (failover). If the sentinels name
        // another one, send it there.
        if (sentinel_ && e.code() == errc::connect_failed && policy.after_hop(Clock::now()) &&
            sentinel_->rediscover(&pool, policy)) {
          continue;
        }
        throw;
      }
      if (demoted(reply)) {
        // A failover made this server a replica: the command did not run. Send it to the
        // master the sentinels name now; while they still name this one, back off and ask
        // again, within the budget.
        if (policy.may_resend(Clock::now())) {
          if (sentinel_->rediscover(&pool, policy) && policy.after_hop(Clock::now())) {
            continue;
          }
          if (const auto pause = policy.after_transient(Clock::now())) {
            std::this_thread::sleep_for(*pause);
            continue;
          }
        }
        call.breakers.failed(pool.breaker());
        throw detail::ServerUnavailable(errc::server_error, refused_message(reply, policy),
                                        Outcome::not_sent);
      }
      ask_target = nullptr;
      const detail::ReplyKind kind = detail::classify(reply, cluster_);
      if (kind == detail::ReplyKind::redirect && policy.after_hop(Clock::now())) {
        auto redirect = detail::parse_redirect(reply.as_string());
        if (redirect->host.empty()) {
          redirect->host = pool.host(); // "the address you asked"
        }
        const std::lock_guard<std::mutex> lock(nodes_mutex_);
        if (redirect->ask) {
          ask_target = &node_locked({redirect->host, redirect->port});
        } else {
          node_locked({redirect->host, redirect->port});
          slot_map_.moved(*redirect);
        }
        continue;
      }
      if (kind == detail::ReplyKind::transient) {
        if (const auto pause = policy.after_transient(Clock::now())) {
          std::this_thread::sleep_for(*pause);
          continue;
        }
      }
      if (kind == detail::ReplyKind::transient || kind == detail::ReplyKind::redirect) {
        call.breakers.failed(pool.breaker());
        throw detail::ServerUnavailable(cluster_ ? errc::cluster_down : errc::server_error,
                                        refused_message(reply, policy), Outcome::not_sent);
      }
      return reply;
    }
  }

  std::string refused_message(const Reply& reply, const detail::RetryPolicy& policy) const {
    return "Redis at " + peer_ + " still answers \"" + reply.as_string() + "\" after " +
           std::to_string(policy.attempts()) + " attempts within the call budget of " +
           std::to_string(budget_.count()) + " ms; nothing ran";
  }

  // The pool of `slot`'s node; reads the slot map first when it is stale or lacks the slot
  // (unless not `may_read_map`: a pipeline that just read it). Throws cluster_down (not sent)
  // when no node serves the slot.
  detail::ConnectionPool& owner(int slot, const detail::RetryPolicy& policy,
                                bool may_read_map = true) {
    if (sentinel_) {
      return sentinel_->pool(policy);
    }
    if (!cluster_) {
      return *standalone_;
    }
    if (may_read_map) {
      {
        const std::lock_guard<std::mutex> lock(nodes_mutex_);
        if (!slot_map_.stale(Clock::now())) {
          if (const auto node = slot_map_.owner(slot)) {
            return *pools_[*node];
          }
        }
      }
      refresh_slots(policy);
    }
    const std::lock_guard<std::mutex> lock(nodes_mutex_);
    const auto node = slot_map_.owner(slot);
    if (!node) {
      throw Error(errc::cluster_down,
                  "no node of " + peer_ + " serves slot " + std::to_string(slot),
                  Outcome::not_sent);
    }
    return *pools_[*node];
  }

  // The pool of `endpoint`, made when first needed; pools_ is indexed like the slot map's
  // nodes and never shrinks, so pool pointers stay valid. Needs nodes_mutex_.
  detail::ConnectionPool& node_locked(const detail::Endpoint& endpoint) {
    const std::size_t index = slot_map_.node_index(endpoint);
    if (index >= pools_.size()) {
      pools_.resize(index + 1);
    }
    if (!pools_[index]) {
      pools_[index] =
          std::make_unique<detail::ConnectionPool>(options_, endpoint.host, endpoint.port);
    }
    return *pools_[index];
  }

  // Reads CLUSTER SLOTS from the first node that answers (the seeds first, then every node
  // learnt since), trying no further node once the call's budget is spent. A node whose
  // breaker is open is not asked (another one is), and each node asked feeds its breaker,
  // so a stalled seed soon stops costing a timeout per refresh.
  void refresh_slots(const detail::RetryPolicy& policy) {
    std::vector<detail::ConnectionPool*> candidates;
    {
      const std::lock_guard<std::mutex> lock(nodes_mutex_);
      for (std::size_t i = 0; i < slot_map_.node_count(); ++i) {
        candidates.push_back(&node_locked(slot_map_.node(i)));
      }
    }
    std::string last_error = "no node to ask";
    for (detail::ConnectionPool* pool : candidates) {
      if (pool->breaker().is_open()) {
        last_error = "the breaker of " + pool->peer() + " is open";
        continue;
      }
      try {
        auto lease = pool->acquire();
        const auto ranges =
            detail::parse_cluster_slots(lease->run({"CLUSTER", "SLOTS"}), pool->host());
        pool->breaker().record_success();
        const std::lock_guard<std::mutex> lock(nodes_mutex_);
        if (slot_map_.assign(ranges, Clock::now())) {
          for (std::size_t i = 0; i < slot_map_.node_count(); ++i) {
            node_locked(slot_map_.node(i));
          }
          return;
        }
      } catch (const Error& e) {
        if (is_infrastructure_failure(e)) {
          pool->breaker().record_failure();
        }
        last_error = e.what();
      }
      if (!policy.may_resend(Clock::now())) {
        break;
      }
    }
    throw Error(errc::connect_failed, "no node of " + peer_ + " gave its slot map: " + last_error,
                Outcome::not_sent);
  }

  // A READONLY reply from a server found through the sentinels: it was demoted, nothing ran.
  bool demoted(const Reply& reply) const { return sentinel_ && detail::is_readonly_reply(reply); }

  RedisOptions options_;
  bool cluster_;
  std::chrono::milliseconds budget_;
  std::string peer_;
  std::unique_ptr<detail::ConnectionPool> standalone_;
  std::mutex nodes_mutex_;
  detail::SlotMap slot_map_;
  std::vector<std::unique_ptr<detail::ConnectionPool>> pools_; // indexed like slot_map_'s nodes
  // Sentinel: the master the sentinels name (null without Sentinel).
  std::unique_ptr<detail::SentinelMaster> sentinel_;
  // Whether scripts that have a library run by FCALL: until a server refuses FCALL or FUNCTION
  // LOAD (renamed away, or an ACL without them); then by EVALSHA for the rest of this Redis's
  // life (a host mixing servers with and without functions runs them all by EVALSHA).
  mutable std::atomic<bool> functions_{true};
};

Redis::Redis(RedisOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Redis::Redis(std::string_view uri) : Redis(RedisOptions::from_uri(uri)) {}

Redis::~Redis() = default;

Reply Redis::command(const std::vector<std::string>& argv, Resend resend) {
  return impl_->resending(resend, [&](Impl::Call& call) { return impl_->command(argv, call); });
}

std::vector<std::pair<std::string, Reply>>
Redis::command_on_masters(const std::vector<std::string>& argv) {
  return impl_->resending(Resend::never,
                          [&](Impl::Call& call) { return impl_->on_masters(argv, call); });
}

Reply Redis::eval(const Script& script, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args, Resend resend) {
  return impl_->resending(resend,
                          [&](Impl::Call& call) { return impl_->eval(script, keys, args, call); });
}

std::vector<Reply> Redis::eval_pipeline(const std::vector<ScriptCall>& calls) {
  return impl_->resending_pipeline(calls, nullptr);
}

std::vector<Reply> Redis::eval_pipeline(const std::vector<ScriptCall>& calls,
                                        std::vector<std::optional<Error>>& refusals) {
  return impl_->resending_pipeline(calls, &refusals);
}

const RedisOptions& Redis::options() const noexcept { return impl_->options(); }

} // namespace limitcounter

// Redis: scripts and commands over a connection pool.
#include <limitcounter/redis.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <thread>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

#include "redis/circuit_breaker.hpp"
#include "redis/cluster_protocol.hpp"
#include "redis/connection_pool.hpp"
#include "redis/key_slot.hpp"

namespace limitcounter {
namespace {

bool is_noscript(const Reply& reply) {
  return reply.is_error() && reply.as_string().compare(0, 8, "NOSCRIPT") == 0;
}

// EVALSHA sha numkeys keys... args...; views into `call`, `numkeys` must outlive the result.
detail::Argv evalsha_argv(const Script& script, const std::vector<std::string>& keys,
                          const std::vector<std::string>& args, const std::string& numkeys) {
  detail::Argv argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back("EVALSHA");
  argv.push_back(script.sha1);
  argv.emplace_back(numkeys);
  for (const auto& key : keys) {
    argv.emplace_back(key);
  }
  for (const auto& arg : args) {
    argv.emplace_back(arg);
  }
  return argv;
}

// Loads `script` on the connection's server; the server must name the same SHA1 we embedded.
void load_script(detail::Connection& connection, const Script& script) {
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

} // namespace

// Routes every call to the node that serves its keys' slot: one node for a standalone
// server; for a cluster, a slot map from CLUSTER SLOTS that follows MOVED, with ASK
// redirections for slots in migration and bounded waits on TRYAGAIN and CLUSTERDOWN.
class Redis::Impl {
public:
  explicit Impl(RedisOptions options)
      : options_(std::move(options)), cluster_(!options_.cluster_seeds.empty()),
        breaker_(options_.breaker_failures, options_.breaker_pause) {
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
    if (options_.pool_wait_timeout.count() < 0) {
      throw Error(errc::invalid_argument, "Redis pool_wait_timeout must not be negative (got " +
                                              std::to_string(options_.pool_wait_timeout.count()) +
                                              " ms)");
    }
    if (options_.cluster_seeds.empty() && options_.unix_socket.empty() &&
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
      peer_ = "cluster " + options_.cluster_seeds.front();
    } else {
      peer_ = options_.unix_socket.empty() ? options_.host + ":" + std::to_string(options_.port)
                                           : options_.unix_socket;
      standalone_ = std::make_unique<detail::ConnectionPool>(
          options_, options_.unix_socket.empty() ? options_.host : std::string(), options_.port);
    }
  }

  Reply command(const std::vector<std::string>& argv) {
    const detail::Argv views(argv.begin(), argv.end());
    // In a cluster the first argument after the command name is taken as the key.
    const int slot = argv.size() > 1 ? detail::key_slot(argv[1]) : no_slot;
    return routed(slot, [&](detail::Connection& connection) { return connection.run(views); });
  }

  Reply eval(const Script& script, const std::vector<std::string>& keys,
             const std::vector<std::string>& args) {
    const std::string numkeys = std::to_string(keys.size());
    const detail::Argv argv = evalsha_argv(script, keys, args, numkeys);
    Reply reply = routed(slot_of(keys, script), [&](detail::Connection& connection) {
      return run_script(connection, script, argv);
    });
    if (reply.is_error()) {
      throw Error(errc::server_error,
                  "script " + std::string(script.name) + " on " + peer_ + ": " + reply.as_string(),
                  Outcome::failed);
    }
    return reply;
  }

  std::vector<Reply> eval_pipeline(const std::vector<ScriptCall>& calls) {
    std::vector<std::string> numkeys;
    numkeys.reserve(calls.size());
    std::vector<detail::Argv> commands;
    commands.reserve(calls.size());
    std::vector<int> slots;
    slots.reserve(calls.size());
    for (const auto& call : calls) {
      if (call.script == nullptr) {
        throw Error(errc::invalid_argument, "a pipelined ScriptCall has no script");
      }
      slots.push_back(slot_of(call.keys, *call.script));
      numkeys.push_back(std::to_string(call.keys.size()));
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      commands.push_back(evalsha_argv(*calls[i].script, calls[i].keys, calls[i].args, numkeys[i]));
    }
    // One pipeline per node. Calls that come back NOSCRIPT did not run: each node loads
    // the missing scripts and runs just those calls again in a second pipeline. Calls
    // redirected or asked to wait did not run either, and go through the router one by one.
    std::vector<Reply> replies(calls.size());
    std::map<detail::ConnectionPool*, std::vector<std::size_t>> by_node;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      by_node[&owner(slots[i])].push_back(i);
    }
    for (const auto& [pool, indexes] : by_node) {
      run_on_node(*pool, commands, indexes, replies);
      rerun_noscript_on_node(*pool, calls, commands, indexes, replies);
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (did_not_run(replies[i])) {
        replies[i] = routed(slots[i], [&](detail::Connection& connection) {
          return run_script(connection, *calls[i].script, commands[i]);
        });
      }
    }
    return replies;
  }

  const RedisOptions& options() const noexcept { return options_; }

  /// Runs `call` unless the circuit breaker is open, and tells the breaker how it went.
  template <typename Call> auto guarded(Call&& call) -> decltype(call()) {
    if (!breaker_.allow()) {
      throw Error(errc::circuit_open,
                  "Redis at " + peer_ + " failed " + std::to_string(options_.breaker_failures) +
                      " times in a row; calls fail fast for " +
                      std::to_string(options_.breaker_pause.count()) + " ms before a probe",
                  Outcome::not_sent);
    }
    try {
      auto result = call();
      breaker_.record_success();
      return result;
    } catch (const Error& e) {
      const auto code = static_cast<errc>(e.code().value());
      if (code == errc::connect_failed || code == errc::timeout || code == errc::io_error) {
        breaker_.record_failure();
      } else {
        breaker_.record_success(); // Redis answered (an error reply, a refusal): it is alive
      }
      throw;
    }
  }

private:
  static constexpr int max_attempts = 6;
  static constexpr int no_slot = -1; ///< a call without keys: any node will do

  // Runs `send` on a connection of `pool`. If the connection turns out to have been closed
  // by the server while it sat in the pool, and not one byte of the request left (the
  // StaleConnection case), runs it once more on another connection: the server never saw
  // the first attempt. This is the only automatic retry of a request; anything that fails
  // after a byte was sent may have run and is left to the caller. `send` must be safe to
  // repeat when its last request was not sent: every request before it in the chain must be
  // free of effects (ASKING, an EVALSHA answered NOSCRIPT, SCRIPT LOAD).
  template <typename Send>
  static auto on_connection(detail::ConnectionPool& pool, Send&& send)
      -> decltype(send(std::declval<detail::Connection&>())) {
    for (int attempt = 1;; ++attempt) {
      auto lease = pool.acquire();
      try {
        return send(*lease);
      } catch (const detail::StaleConnection&) {
        if (attempt >= 2) {
          throw;
        }
      }
    }
  }

  // The calls `indexes` of one node in one pipeline; their replies go to `replies`.
  static void run_on_node(detail::ConnectionPool& pool, const std::vector<detail::Argv>& commands,
                          const std::vector<std::size_t>& indexes, std::vector<Reply>& replies) {
    std::vector<detail::Argv> batch;
    batch.reserve(indexes.size());
    for (const std::size_t i : indexes) {
      batch.push_back(commands[i]);
    }
    std::vector<Reply> answered = on_connection(
        pool, [&](detail::Connection& connection) { return connection.run_pipeline(batch); });
    for (std::size_t j = 0; j < indexes.size(); ++j) {
      replies[indexes[j]] = std::move(answered[j]);
    }
  }

  // The calls of `indexes` that came back NOSCRIPT, again, in one pipeline that first loads
  // each missing script once: SCRIPT LOAD s..., EVALSHA.... A script the node refuses to
  // load, or loads under another SHA1 than the embedded one, leaves an error reply in
  // place of its calls (they did not run), so that the calls that did run keep their
  // replies.
  static void rerun_noscript_on_node(detail::ConnectionPool& pool,
                                     const std::vector<ScriptCall>& calls,
                                     const std::vector<detail::Argv>& commands,
                                     const std::vector<std::size_t>& indexes,
                                     std::vector<Reply>& replies) {
    std::vector<std::size_t> again;
    std::vector<const Script*> missing;
    for (const std::size_t i : indexes) {
      if (is_noscript(replies[i])) {
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
      return;
    }
    std::vector<detail::Argv> batch;
    batch.reserve(missing.size() + again.size());
    for (const Script* script : missing) {
      batch.push_back({"SCRIPT", "LOAD", script->source});
    }
    for (const std::size_t i : again) {
      batch.push_back(commands[i]);
    }
    std::vector<Reply> answered = on_connection(
        pool, [&](detail::Connection& connection) { return connection.run_pipeline(batch); });
    std::vector<std::optional<Reply>> load_failures(missing.size());
    for (std::size_t m = 0; m < missing.size(); ++m) {
      const Reply& loaded = answered[m];
      if (loaded.is_error()) {
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
      replies[i] = load_failures[m] && is_noscript(reply) ? *load_failures[m] : std::move(reply);
    }
  }
  bool did_not_run(const Reply& reply) const {
    if (!reply.is_error()) {
      return false;
    }
    const std::string& text = reply.as_string();
    return is_noscript(reply) || detail::is_transient_error(text) ||
           (cluster_ && detail::parse_redirect(text));
  }

  // EVALSHA, loading the script into this node's cache once if it answers NOSCRIPT: the
  // call did not run then, so running it again is safe.
  static Reply run_script(detail::Connection& connection, const Script& script,
                          const detail::Argv& argv) {
    Reply reply = connection.run(argv);
    if (is_noscript(reply)) {
      load_script(connection, script);
      reply = connection.run(argv);
    }
    return reply;
  }

  // The one slot of `keys`; no_slot for no keys. A cluster refuses keys of several slots
  // here, before anything is sent.
  int slot_of(const std::vector<std::string>& keys, const Script& script) const {
    if (keys.empty()) {
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

  // A template, not std::function: the callers' lambdas would not fit its inline storage,
  // and this is one heap allocation per call saved.
  template <typename Send> Reply routed(int slot, const Send& send) {
    detail::ConnectionPool* ask_target = nullptr;
    for (int attempt = 1;; ++attempt) {
      detail::ConnectionPool& pool = ask_target != nullptr ? *ask_target : owner(slot);
      Reply reply;
      try {
        reply = on_connection(pool, [&](detail::Connection& connection) {
          if (ask_target != nullptr) {
            connection.run({"ASKING"});
          }
          return send(connection);
        });
      } catch (const Error& e) {
        // Not sent: the node may be gone (failover). Learn the map again and retry.
        if (cluster_ && e.code() == errc::connect_failed && attempt < max_attempts) {
          refresh_slots();
          continue;
        }
        throw;
      }
      ask_target = nullptr;
      if (!reply.is_error()) {
        return reply;
      }
      const std::string& text = reply.as_string();
      const auto redirect = cluster_ ? detail::parse_redirect(text) : std::nullopt;
      const bool transient = detail::is_transient_error(text);
      if (!redirect && !transient) {
        return reply;
      }
      if (attempt >= max_attempts) {
        throw Error(cluster_ ? errc::cluster_down : errc::server_error,
                    "Redis at " + peer_ + " still answers \"" + text + "\" after " +
                        std::to_string(max_attempts) + " attempts; nothing ran",
                    Outcome::not_sent);
      }
      if (redirect && redirect->ask) {
        ask_target = &node(redirect->host, redirect->port);
      } else if (redirect) {
        const std::lock_guard<std::mutex> lock(nodes_mutex_);
        slots_[redirect->slot] = &node_locked(redirect->host, redirect->port);
        next_refresh_ = {}; // the map is stale: learn it again on the next call
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10) * (1 << (attempt - 1)));
      }
    }
  }

  detail::ConnectionPool& owner(int slot) {
    if (!cluster_) {
      return *standalone_;
    }
    bool stale = false;
    {
      const std::lock_guard<std::mutex> lock(nodes_mutex_);
      stale = std::chrono::steady_clock::now() >= next_refresh_;
      if (!stale) {
        if (detail::ConnectionPool* pool =
                slots_[slot == no_slot ? 0 : static_cast<std::size_t>(slot)]) {
          return *pool;
        }
      }
    }
    refresh_slots();
    const std::lock_guard<std::mutex> lock(nodes_mutex_);
    detail::ConnectionPool* pool = slots_[slot == no_slot ? 0 : static_cast<std::size_t>(slot)];
    if (pool == nullptr) {
      throw Error(errc::cluster_down,
                  "no node of " + peer_ + " serves slot " + std::to_string(slot),
                  Outcome::not_sent);
    }
    return *pool;
  }

  detail::ConnectionPool& node(const std::string& host, int port) {
    const std::lock_guard<std::mutex> lock(nodes_mutex_);
    return node_locked(host, port);
  }

  detail::ConnectionPool& node_locked(const std::string& host, int port) {
    auto& pool = nodes_[host + ":" + std::to_string(port)];
    if (!pool) {
      pool = std::make_unique<detail::ConnectionPool>(options_, host, port);
    }
    return *pool;
  }

  // Reads CLUSTER SLOTS from the first node that answers (known nodes, then the seeds).
  void refresh_slots() {
    std::vector<std::pair<std::string, int>> candidates;
    {
      const std::lock_guard<std::mutex> lock(nodes_mutex_);
      for (const auto& [name, pool] : nodes_) {
        candidates.emplace_back(pool->host(), pool->port());
      }
    }
    for (const auto& seed : options_.cluster_seeds) {
      const auto colon = seed.rfind(':');
      std::string host = seed.substr(0, colon);
      if (host.size() > 2 && host.front() == '[') {
        host = host.substr(1, host.size() - 2);
      }
      candidates.emplace_back(host, std::stoi(seed.substr(colon + 1)));
    }
    std::string last_error = "no node to ask";
    for (const auto& [host, port] : candidates) {
      try {
        auto lease = node(host, port).acquire();
        const auto ranges = detail::parse_cluster_slots(lease->run({"CLUSTER", "SLOTS"}));
        if (ranges.empty()) {
          continue;
        }
        const std::lock_guard<std::mutex> lock(nodes_mutex_);
        for (const auto& range : ranges) {
          detail::ConnectionPool& pool = node_locked(range.host, range.port);
          for (unsigned s = range.first; s <= range.last; ++s) {
            slots_[s] = &pool;
          }
        }
        next_refresh_ = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        return;
      } catch (const Error& e) {
        last_error = e.what();
      }
    }
    throw Error(errc::connect_failed, "no node of " + peer_ + " gave its slot map: " + last_error,
                Outcome::not_sent);
  }

  RedisOptions options_;
  bool cluster_;
  std::string peer_;
  std::unique_ptr<detail::ConnectionPool> standalone_;
  std::mutex nodes_mutex_;
  std::map<std::string, std::unique_ptr<detail::ConnectionPool>>
      nodes_; // never shrinks: pointers stay valid
  std::array<detail::ConnectionPool*, detail::cluster_slots> slots_{};
  std::chrono::steady_clock::time_point next_refresh_{};
  detail::CircuitBreaker breaker_;
};

Redis::Redis(RedisOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Redis::Redis(std::string_view uri) : Redis(RedisOptions::from_uri(uri)) {}

Redis::~Redis() = default;

Reply Redis::command(const std::vector<std::string>& argv) {
  return impl_->guarded([&] { return impl_->command(argv); });
}

Reply Redis::eval(const Script& script, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args) {
  return impl_->guarded([&] { return impl_->eval(script, keys, args); });
}

std::vector<Reply> Redis::eval_pipeline(const std::vector<ScriptCall>& calls) {
  return impl_->guarded([&] { return impl_->eval_pipeline(calls); });
}

const RedisOptions& Redis::options() const noexcept { return impl_->options(); }

} // namespace limitcounter

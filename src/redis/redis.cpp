// Redis: scripts and commands over a connection pool.
#include <limitcounter/redis.hpp>

#include <algorithm>

#include <limitcounter/error.hpp>

#include "redis/circuit_breaker.hpp"
#include "redis/connection_pool.hpp"

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

class Redis::Impl {
public:
  explicit Impl(RedisOptions options)
      : options_(std::move(options)),
        pool_(options_, options_.unix_socket.empty() ? options_.host : std::string(),
              options_.port) {
    if (options_.pool_size == 0) {
      throw Error(errc::invalid_argument, "Redis pool_size must be at least 1");
    }
    if (!options_.cluster_seeds.empty()) {
      throw Error(errc::invalid_argument,
                  "Redis Cluster seeds given, but this build has no cluster routing yet");
    }
  }

  Reply command(const std::vector<std::string>& argv) {
    detail::Argv views(argv.begin(), argv.end());
    auto lease = pool_.acquire();
    return lease->run(views);
  }

  Reply eval(const Script& script, const std::vector<std::string>& keys,
             const std::vector<std::string>& args) {
    const std::string numkeys = std::to_string(keys.size());
    const detail::Argv argv = evalsha_argv(script, keys, args, numkeys);
    auto lease = pool_.acquire();
    Reply reply = lease->run(argv);
    if (is_noscript(reply)) {
      // The server lost its script cache (restart, SCRIPT FLUSH, failover): NOSCRIPT means
      // the call did not run, so loading and running it once more is safe.
      load_script(*lease, script);
      reply = lease->run(argv);
    }
    if (reply.is_error()) {
      throw Error(errc::server_error,
                  "script " + std::string(script.name) + " on " + lease->peer() + ": " +
                      reply.as_string(),
                  Outcome::failed);
    }
    return reply;
  }

  std::vector<Reply> eval_pipeline(const std::vector<ScriptCall>& calls) {
    std::vector<std::string> numkeys;
    numkeys.reserve(calls.size());
    std::vector<detail::Argv> commands;
    commands.reserve(calls.size());
    for (const auto& call : calls) {
      if (call.script == nullptr) {
        throw Error(errc::invalid_argument, "a pipelined ScriptCall has no script");
      }
      numkeys.push_back(std::to_string(call.keys.size()));
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      commands.push_back(evalsha_argv(*calls[i].script, calls[i].keys, calls[i].args, numkeys[i]));
    }
    auto lease = pool_.acquire();
    std::vector<Reply> replies = lease->run_pipeline(commands);

    std::vector<std::size_t> again;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (is_noscript(replies[i])) {
        again.push_back(i);
      }
    }
    if (!again.empty()) {
      std::vector<const Script*> loaded;
      std::vector<detail::Argv> retry;
      for (const std::size_t i : again) {
        if (std::find(loaded.begin(), loaded.end(), calls[i].script) == loaded.end()) {
          load_script(*lease, *calls[i].script);
          loaded.push_back(calls[i].script);
        }
        retry.push_back(commands[i]);
      }
      std::vector<Reply> retried = lease->run_pipeline(retry);
      for (std::size_t j = 0; j < again.size(); ++j) {
        replies[again[j]] = std::move(retried[j]);
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
  RedisOptions options_;
  detail::ConnectionPool pool_;
  detail::CircuitBreaker breaker_{options_.breaker_failures, options_.breaker_pause};
  std::string peer_ = options_.unix_socket.empty()
                          ? options_.host + ":" + std::to_string(options_.port)
                          : options_.unix_socket;
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

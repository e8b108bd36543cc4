#include "redis/sentinel.hpp"

#include <algorithm>
#include <charconv>

#include <limitcounter/key_part.hpp>

#include "redis/connection.hpp"
#include "redis/tls_transport.hpp"

namespace limitcounter::detail {
namespace {

bool has_prefix(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string endpoint_text(const Endpoint& endpoint) {
  return endpoint.host.find(':') != std::string::npos
             ? "[" + endpoint.host + "]:" + std::to_string(endpoint.port)
             : endpoint.host + ":" + std::to_string(endpoint.port);
}

} // namespace

std::optional<Endpoint> parse_master_addr(const Reply& reply) {
  if (reply.is_nil()) {
    return std::nullopt;
  }
  const auto bad = [&]() {
    return Error(errc::protocol_error,
                 "SENTINEL GET-MASTER-ADDR-BY-NAME answered " + reply.debug_string() +
                     ", not [host, port]",
                 Outcome::failed);
  };
  if (reply.type() != Reply::Type::array || reply.as_array().size() != 2 ||
      reply.at(0).type() != Reply::Type::string || reply.at(1).type() != Reply::Type::string) {
    throw bad();
  }
  const std::string& host = reply.at(0).as_string();
  const std::string& port_text = reply.at(1).as_string();
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  const auto parsed = std::from_chars(port_text.data(), end, port);
  if (host.empty() || parsed.ec != std::errc{} || parsed.ptr != end || port < 1 || port > 65535) {
    throw bad();
  }
  return Endpoint{host, port};
}

bool role_is_master(const Reply& reply) { return role_name(reply) == "master"; }

std::string role_name(const Reply& reply) {
  if (reply.type() == Reply::Type::array && !reply.as_array().empty() &&
      reply.at(0).type() == Reply::Type::string) {
    return reply.at(0).as_string();
  }
  return reply.debug_string();
}

bool is_readonly_reply(const Reply& reply) {
  return reply.is_error() && has_prefix(reply.as_string(), "READONLY ");
}

bool calls_for_rediscovery(const Error& error) {
  return error.code() == errc::connect_failed || error.code() == errc::io_error ||
         error.code() == errc::timeout;
}

std::vector<Endpoint> check_sentinel_options(const RedisOptions& options) {
  if (options.sentinels.empty()) {
    if (!options.sentinel_master.empty()) {
      throw Error(errc::invalid_argument, "Redis sentinel_master " +
                                              quote_for_message(options.sentinel_master) +
                                              " is set but no sentinels are given");
    }
    return {};
  }
  if (!options.cluster_seeds.empty()) {
    throw Error(errc::invalid_argument,
                "Redis sentinels and cluster_seeds are both set: a Redis Cluster has no sentinels");
  }
  const std::string& name = options.sentinel_master;
  if (name.empty() || name.size() > 256) {
    throw Error(errc::invalid_argument,
                "Redis sentinel_master " + quote_for_message(name) +
                    " must be the master name the sentinels monitor (1 to 256 bytes)");
  }
  if (const auto problem = id_text_problem(name)) {
    throw_text_problem("Redis sentinel_master", name, problem);
  }
  std::vector<Endpoint> sentinels;
  for (const auto& seed : options.sentinels) {
    sentinels.push_back(parse_seed(seed, "Redis sentinel"));
  }
  return sentinels;
}

SentinelClient::SentinelClient(const RedisOptions& options)
    : sentinel_options_(options), master_name_(options.sentinel_master),
      sentinels_(check_sentinel_options(options)) {
  sentinel_options_.user.clear();
  sentinel_options_.password = options.sentinel_password;
  sentinel_options_.db = 0;
  sentinel_options_.unix_socket.clear();
  tls_ = make_tls_context(sentinel_options_);
  std::string list;
  for (const auto& sentinel : sentinels_) {
    list += (list.empty() ? "" : ",") + endpoint_text(sentinel);
  }
  description_ = "master " + quote_for_message(master_name_) + " (sentinels " + list + ")";
}

Endpoint SentinelClient::master(const RetryPolicy& policy, const Confirm& confirm) {
  std::vector<Endpoint> order;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    order = sentinels_;
  }
  std::string answers;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i > 0 && !policy.may_resend(RetryPolicy::Clock::now())) {
      answers += "; no time left in the call budget to ask the others";
      break;
    }
    const std::string sentinel = endpoint_text(order[i]);
    std::string answer;
    try {
      // A sentinel is not a data server: no server check (version, eviction), no SELECT.
      const auto connection =
          Connection::open(sentinel_options_, order[i].host, order[i].port, false, tls_);
      const Reply reply = connection->run({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", master_name_});
      if (reply.is_error()) {
        answer = "answered " + reply.as_string();
      } else if (const auto address = parse_master_addr(reply)) {
        const auto refusal = confirm(*address);
        if (!refusal) {
          // The sentinel that answered is asked first next time.
          const std::lock_guard<std::mutex> lock(mutex_);
          const auto it = std::find(sentinels_.begin(), sentinels_.end(), order[i]);
          if (it != sentinels_.end()) {
            std::rotate(sentinels_.begin(), it, it + 1);
          }
          return *address;
        }
        answer = "named " + endpoint_text(*address) + ", which " + *refusal;
      } else {
        answer = "does not know a master named " + quote_for_message(master_name_);
      }
    } catch (const Error& e) {
      answer = e.what();
    }
    answers += (answers.empty() ? "" : "; ") + sentinel + ": " + answer;
  }
  throw Error(errc::connect_failed,
              "no sentinel gave a usable address of " + description_ + ": " + answers +
                  "; nothing was sent",
              Outcome::not_sent);
}

} // namespace limitcounter::detail

// RedisOptions::from_uri: the URI grammar, kept free of I/O so it is unit-tested.
#include <limitcounter/redis.hpp>

#include <charconv>

#include <limitcounter/error.hpp>
#include <limitcounter/key_part.hpp>

namespace limitcounter {
namespace {

[[noreturn]] void bad_uri(const std::string& problem) {
  throw Error(errc::invalid_argument, "Redis URI: " + problem);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// Percent-decoding of the user and password. `what` names the part in errors; the
// value itself is never shown, since it may be a secret.
std::string percent_decode(std::string_view text, const char* what) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int high = i + 2 < text.size() ? hex_value(text[i + 1]) : -1;
    const int low = i + 2 < text.size() ? hex_value(text[i + 2]) : -1;
    if (high < 0 || low < 0) {
      bad_uri(std::string("bad percent-encoding in the ") + what);
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

// A number is echoed only when it is one (an out-of-range port or db): any other text there
// may be a password that lost its '@' ("redis://user:secret") or its key ("?db=0&secret").
int parse_number(std::string_view text, const char* what, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, value);
  if (text.empty() || result.ec != std::errc{} || result.ptr != end || value < min || value > max) {
    const std::string_view digits = !text.empty() && text.front() == '-' ? text.substr(1) : text;
    const bool numeric = !digits.empty() && digits.size() <= 12 &&
                         digits.find_first_not_of("0123456789") == std::string_view::npos;
    bad_uri(std::string(what) + (numeric ? " " + detail::quote_for_message(text) : std::string()) +
            " is not a number from " + std::to_string(min) + " to " + std::to_string(max));
  }
  return value;
}

// "host", "host:port", "[v6]" or "[v6]:port". The port is checked before the host is echoed:
// "redis://user:secret" (a forgotten '@') reads as host "user", port "secret".
std::pair<std::string, int> parse_host_port(std::string_view text, int default_port = 6379) {
  std::string_view host = text;
  std::string_view port;
  bool has_port = false; // "host:" has one, and it is empty: an error, not the default
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      bad_uri("a host opens '[' without ']'");
    }
    host = text.substr(1, close - 1);
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        bad_uri("unexpected text after the IPv6 host (a port follows ':')");
      }
      port = rest.substr(1);
      has_port = true;
    }
    if (host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos) {
      bad_uri("host " + detail::quote_for_message(host) + " in brackets is not an IPv6 address");
    }
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
    if (host.find(':') != std::string_view::npos) {
      // Not echoed: "redis://:secret:host:6379" (a forgotten '@') would show the password.
      bad_uri("the host has a ':' (an IPv6 address goes in brackets, as in [::1]:6379; a "
              "password ends with '@')");
    }
  }
  const int number = has_port ? parse_number(port, "port", 1, 65535) : default_port;
  if (host.empty()) {
    bad_uri("the host is missing");
  }
  for (const char c : host) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == '/' || c == '@' || c == '?' || c == '#') {
      bad_uri("host " + detail::quote_for_message(host) + " has a character not allowed in a host");
    }
  }
  return {std::string(host), number};
}

void parse_credentials(std::string_view userinfo, RedisOptions& options) {
  const auto colon = userinfo.find(':');
  if (colon == std::string_view::npos) {
    // A lone "secret@" is a password, as redis-cli reads it.
    options.password = percent_decode(userinfo, "password");
    return;
  }
  options.user = percent_decode(userinfo.substr(0, colon), "user name");
  options.password = percent_decode(userinfo.substr(colon + 1), "password");
}

struct QueryParameter {
  std::string_view key;
  std::string value; // percent-decoded
};

// A query key in a message. Only a plain lower-case name is echoed: a "key" may be a secret
// pasted without one (base64 ends with '='), and a value is never echoed.
std::string key_for_message(std::string_view key) {
  const bool plain = !key.empty() && key.size() <= 24 &&
                     key.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string_view::npos;
  return plain ? detail::quote_for_message(key) : std::string("(not shown: not a plain name)");
}

// `key=value&...`, each value percent-decoded and not empty.
std::vector<QueryParameter> parse_query(std::string_view query) {
  std::vector<QueryParameter> parameters;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto equals = pair.find('=');
    if (equals == std::string_view::npos || equals + 1 == pair.size()) {
      bad_uri("query parameter " + key_for_message(pair.substr(0, equals)) +
              " has no value (key=value)");
    }
    parameters.push_back(
        {pair.substr(0, equals), percent_decode(pair.substr(equals + 1), "query")});
  }
  return parameters;
}

// The query of unix:// and redis-sentinel://: `db=N` only.
int parse_db_query(std::string_view query) {
  int db = 0;
  for (const QueryParameter& parameter : parse_query(query)) {
    if (parameter.key != "db") {
      bad_uri("unknown query parameter " + key_for_message(parameter.key) + " (only db=N)");
    }
    db = parse_number(parameter.value, "db", 0, 1 << 20);
  }
  return db;
}

// The query of a TCP URI. Every key sets a TLS option, so it needs a TLS scheme (a query on
// redis:// would otherwise be ignored and send in clear).
void parse_tls_query(std::string_view query, bool tls, RedisOptions& options) {
  for (QueryParameter& parameter : parse_query(query)) {
    const std::string_view key = parameter.key;
    std::string* field = key == "ca_file"       ? &options.tls.ca_file
                         : key == "ca_dir"      ? &options.tls.ca_dir
                         : key == "cert_file"   ? &options.tls.cert_file
                         : key == "key_file"    ? &options.tls.key_file
                         : key == "server_name" ? &options.tls.server_name
                                                : nullptr;
    if (field == nullptr && key != "verify_peer") {
      bad_uri("unknown query parameter " + key_for_message(key) +
              " (ca_file, ca_dir, cert_file, key_file, server_name, verify_peer)");
    }
    if (!tls) {
      bad_uri("query parameter " + key_for_message(key) +
              " is a TLS option: use rediss:// or rediss-cluster://");
    }
    if (field != nullptr) {
      *field = std::move(parameter.value);
    } else if (parameter.value == "yes" || parameter.value == "no") {
      options.tls.verify_peer = parameter.value == "yes";
    } else {
      bad_uri("verify_peer is neither yes nor no");
    }
  }
}

// "host:port,host,[v6]:port" as seeds "host:port" (a host without port gets `default_port`).
std::vector<std::string> parse_host_list(std::string_view list, int default_port) {
  std::vector<std::string> seeds;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const auto [host, port] = parse_host_port(list.substr(0, comma), default_port);
    seeds.push_back(host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                                        : host + ":" + std::to_string(port));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return seeds;
}

// The path of a redis-sentinel:// URI: "master-name", "master-name/db" or "master-name?db=N".
void parse_sentinel_path(std::string_view path, RedisOptions& options) {
  if (const auto question = path.find('?'); question != std::string_view::npos) {
    options.db = parse_db_query(path.substr(question + 1));
    path = path.substr(0, question);
    if (path.find('/') != std::string_view::npos) {
      bad_uri("the db is given twice (as /db and as ?db=)");
    }
  }
  const auto slash = path.find('/');
  options.sentinel_master = std::string(path.substr(0, slash));
  if (options.sentinel_master.empty()) {
    bad_uri("redis-sentinel:// needs the master name after the sentinels, as in "
            "redis-sentinel://host:26379/mymaster");
  }
  if (slash != std::string_view::npos) {
    options.db = parse_number(path.substr(slash + 1), "db", 0, 1 << 20);
  }
}

} // namespace

RedisOptions RedisOptions::from_uri(std::string_view uri) {
  RedisOptions options;
  const auto scheme_end = uri.find("://");
  if (scheme_end == std::string_view::npos) {
    bad_uri("missing scheme (redis://, rediss://, unix://, redis-cluster://, rediss-cluster:// or "
            "redis-sentinel://)");
  }
  const std::string_view scheme = uri.substr(0, scheme_end);
  std::string_view rest = uri.substr(scheme_end + 3);

  if (scheme == "unix") {
    // unix://[[user]:password@]/path[?db=N]. The userinfo ends at the last "@/": a password
    // may hold '/' and '?' (base64 does), a socket path rarely "@/".
    if (!rest.empty() && rest.front() != '/') {
      const auto slash_at = rest.rfind("@/");
      const auto at = slash_at != std::string_view::npos ? slash_at : rest.rfind('@');
      if (at != std::string_view::npos) {
        parse_credentials(rest.substr(0, at), options);
        rest.remove_prefix(at + 1);
      }
    }
    if (const auto question = rest.find('?'); question != std::string_view::npos) {
      options.db = parse_db_query(rest.substr(question + 1));
      rest = rest.substr(0, question);
    }
    if (rest.empty() || rest.front() != '/') {
      // Not echoed: what precedes the path may be a password that lost its '@'.
      bad_uri("the unix socket path is missing or not absolute (unix:///path/to/socket)");
    }
    options.unix_socket = std::string(rest);
    return options;
  }
  const bool tls = scheme == "rediss" || scheme == "rediss-cluster";
  const bool cluster = scheme == "redis-cluster" || scheme == "rediss-cluster";
  const bool sentinel = scheme == "redis-sentinel";
  if (scheme != "redis" && !cluster && !tls && !sentinel) {
    // Only a short, plain scheme is echoed: anything else may be a mangled secret.
    const bool plain = scheme.size() <= 16 &&
                       scheme.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789+-.") ==
                           std::string_view::npos;
    bad_uri("unsupported scheme" +
            (plain ? " " + detail::quote_for_message(scheme) : std::string()) +
            " (redis://, rediss://, unix://, redis-cluster://, rediss-cluster:// or "
            "redis-sentinel://)");
  }
  options.tls.enabled = tls;

  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    parse_credentials(rest.substr(0, at), options);
    rest.remove_prefix(at + 1);
  }
  // (A redis-sentinel:// query follows its master name: see parse_sentinel_path.)
  if (const auto question = rest.find('?'); question != std::string_view::npos && !sentinel) {
    parse_tls_query(rest.substr(question + 1), tls, options);
    rest = rest.substr(0, question);
  }
  std::string_view path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }

  if (cluster) {
    if (!path.empty()) {
      bad_uri("a cluster has no database number (nothing may follow the hosts' '/')");
    }
    options.cluster_seeds = parse_host_list(rest, 6379);
    if (options.cluster_seeds.empty()) {
      bad_uri(std::string(scheme) + ":// needs at least one host:port");
    }
    return options;
  }
  if (sentinel) {
    parse_sentinel_path(path, options);
    options.sentinels = parse_host_list(rest, 26379);
    if (options.sentinels.empty()) {
      bad_uri("redis-sentinel:// needs at least one sentinel host[:port]");
    }
    return options;
  }

  auto [host, port] = parse_host_port(rest);
  options.host = std::move(host);
  options.port = port;
  if (!path.empty()) {
    options.db = parse_number(path, "db", 0, 1 << 20);
  }
  return options;
}

} // namespace limitcounter

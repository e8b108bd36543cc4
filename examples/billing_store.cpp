#include "billing_store.hpp"

#include <cstdlib>
#include <stdexcept>
#include <utility>

namespace billing {

Change change_of(const limitcounter::JournalEvent& event) {
  if (event.type == "deduct" || event.type == "credit") {
    return {Change::Order::insert, std::nullopt};
  }
  if (event.type == "rollback") {
    return {Change::Order::roll_back, std::nullopt};
  }
  if (event.type == "freeze") {
    return {Change::Order::none, event.reason};
  }
  if (event.type == "unfreeze") {
    return {Change::Order::none, std::string()};
  }
  throw std::invalid_argument("unknown journal event type '" + event.type + "' (event " + event.id +
                              ")");
}

#ifndef LIMITCOUNTER_BILLING_MARIADB
std::unique_ptr<Store> open_mariadb(const MariadbOptions&) {
  throw std::runtime_error("billing was built without libmariadb (Debian: libmariadb-dev)");
}
#endif

bool Store::apply(const limitcounter::JournalEvent& event) {
  const Change change = change_of(event);
  const std::lock_guard<std::mutex> lock(mutex_);
  begin();
  try {
    const auto version = locked_version(event.user);
    if (!version) {
      throw std::runtime_error("no account '" + event.user + "' for event " + event.id);
    }
    // else applied before (redelivered, replayed), or a dead letter whose balance is in the
    // later events'
    const bool newer = event.version > *version;
    if (newer) {
      set_account(event, change.freeze_reason);
    }
    if (change.order == Change::Order::insert) {
      insert_order(event);
    } else if (change.order == Change::Order::roll_back) {
      roll_back_order(event);
    }
    commit();
    return newer;
  } catch (...) {
    roll_back();
    throw;
  }
}

namespace {

unsigned parse_port(const std::string& text) {
  std::size_t end = 0;
  unsigned long port = 0;
  try {
    port = std::stoul(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end == 0 || end != text.size() || port == 0 || port > 65535) {
    throw std::invalid_argument("bad MariaDB port '" + text + "' (1 to 65535)");
  }
  return static_cast<unsigned>(port);
}

} // namespace

std::unique_ptr<Store> open_store(std::vector<std::string>& args) {
  MariadbOptions mariadb;
  std::string port = std::to_string(mariadb.port);
  std::string sqlite_path;
  // Each setting: its option, its environment variable (none for the SQLite path), its value.
  const std::pair<const char*, const char*> names[] = {
      {"--mysql-host=", "LIMITCOUNTER_MYSQL_HOST"},
      {"--mysql-port=", "LIMITCOUNTER_MYSQL_PORT"},
      {"--mysql-socket=", "LIMITCOUNTER_MYSQL_SOCKET"},
      {"--mysql-user=", "LIMITCOUNTER_MYSQL_USER"},
      {"--mysql-password=", "LIMITCOUNTER_MYSQL_PASSWORD"},
      {"--mysql-database=", "LIMITCOUNTER_MYSQL_DATABASE"},
      {"--sqlite=", nullptr}};
  std::string* const values[] = {
      &mariadb.host,     &port,       &mariadb.socket, &mariadb.user, &mariadb.password,
      &mariadb.database, &sqlite_path};
  for (std::size_t i = 0; i < std::size(names); ++i) {
    if (names[i].second != nullptr) {
      if (const char* from_env = std::getenv(names[i].second)) {
        *values[i] = from_env;
      }
    }
  }

  bool use_mariadb = false;
  std::vector<std::string> rest;
  for (const auto& arg : args) {
    if (arg == "--mysql") {
      use_mariadb = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      rest.push_back(arg);
      continue;
    }
    bool known = false;
    for (std::size_t i = 0; i < std::size(names) && !known; ++i) {
      const std::string name = names[i].first;
      if (arg.rfind(name, 0) == 0) {
        *values[i] = arg.substr(name.size());
        known = true;
      }
    }
    if (!known) {
      // only the name: a mistyped password option must not print the password
      throw std::invalid_argument("unknown option " + arg.substr(0, arg.find('=')));
    }
  }
  args = std::move(rest);

  if (use_mariadb) {
    if (!sqlite_path.empty()) {
      throw std::invalid_argument("--sqlite and --mysql exclude each other");
    }
    mariadb.port = parse_port(port);
    return open_mariadb(mariadb);
  }
  if (!sqlite_path.empty()) {
    return open_sqlite(sqlite_path, false);
  }
  const auto run = limitcounter::Clock::now().time_since_epoch().count();
  return open_sqlite("/tmp/limitcounter-billing-" + std::to_string(run) + ".db", true);
}

} // namespace billing

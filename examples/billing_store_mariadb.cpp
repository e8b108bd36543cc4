// The billing store in MariaDB/MySQL (libmariadb): one connection, used under a mutex; InnoDB
// tables, so a transaction's SELECT ... FOR UPDATE locks the account's row against other
// persisters.

#include "billing_store.hpp"

#include <cctype>
#include <mutex>
#include <stdexcept>

#include <mysql.h>

namespace billing {
namespace {

namespace lc = limitcounter;

class MariadbStore final : public Store {
public:
  explicit MariadbStore(const MariadbOptions& options) : db_(mysql_init(nullptr)) {
    if (db_ == nullptr) {
      throw std::runtime_error("mariadb: out of memory");
    }
    for (const char c : options.database) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') {
        mysql_close(db_);
        throw std::invalid_argument("bad MariaDB database name '" + options.database +
                                    "' (letters, digits and _)");
      }
    }
    const unsigned int timeout_seconds = 10;
    mysql_options(db_, MYSQL_OPT_CONNECT_TIMEOUT, &timeout_seconds);
    mysql_options(db_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    // A socket is used only with host "localhost" (or none).
    const bool by_socket = !options.socket.empty();
    if (mysql_real_connect(
            db_, by_socket ? "localhost" : options.host.c_str(), options.user.c_str(),
            options.password.empty() ? nullptr : options.password.c_str(), nullptr, options.port,
            by_socket ? options.socket.c_str() : nullptr, 0) == nullptr) {
      const std::string message = mysql_error(db_);
      mysql_close(db_);
      throw std::runtime_error(
          "mariadb: cannot connect as " + options.user + " to " +
          (by_socket ? options.socket : options.host + ":" + std::to_string(options.port)) + ": " +
          message);
    }
    try {
      execute("CREATE DATABASE IF NOT EXISTS `" + options.database + "`");
      execute("USE `" + options.database + "`");
      execute("CREATE TABLE IF NOT EXISTS accounts (user_id VARCHAR(255) PRIMARY KEY, balance "
              "BIGINT NOT NULL, version BIGINT NOT NULL, threshold BIGINT NOT NULL, "
              "freeze_reason VARCHAR(1024) NOT NULL DEFAULT '') ENGINE=InnoDB");
      execute("CREATE TABLE IF NOT EXISTS orders (id VARCHAR(255) PRIMARY KEY, user_id "
              "VARCHAR(255) NOT NULL, type VARCHAR(16) NOT NULL, amount BIGINT NOT NULL, state "
              "VARCHAR(16) NOT NULL) ENGINE=InnoDB");
    } catch (...) {
      mysql_close(db_);
      throw;
    }
  }
  ~MariadbStore() override { mysql_close(db_); }
  MariadbStore(const MariadbStore&) = delete;
  MariadbStore& operator=(const MariadbStore&) = delete;

  void open_account(const std::string& user, const lc::AccountSnapshot& snapshot) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    execute("INSERT IGNORE INTO accounts VALUES (" + quote(user) + ", " +
            std::to_string(snapshot.balance) + ", " + std::to_string(snapshot.version) + ", " +
            std::to_string(snapshot.threshold) + ", " + quote(snapshot.freeze_reason) + ")");
  }

  std::optional<lc::AccountSnapshot> account(const std::string& user) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto row = first_row("SELECT balance, version, threshold, freeze_reason FROM accounts "
                               "WHERE user_id = " +
                               quote(user));
    if (!row) {
      return std::nullopt;
    }
    return lc::AccountSnapshot{std::stoll((*row)[0]), std::stoll((*row)[1]), std::stoll((*row)[2]),
                               (*row)[3]};
  }

  std::int64_t orders(const std::string& prefix, const std::string& state) override {
    const std::lock_guard<std::mutex> lock(mutex_);
    return std::stoll(first_row("SELECT COUNT(*) FROM orders WHERE LEFT(id, " +
                                std::to_string(prefix.size()) + ") = " + quote(prefix) +
                                " AND state = " + quote(state))
                          ->at(0));
  }

protected:
  void begin() override { execute("START TRANSACTION"); }
  void commit() override { execute("COMMIT"); }
  void roll_back() noexcept override { mysql_query(db_, "ROLLBACK"); }

  std::optional<std::int64_t> locked_version(const std::string& user) override {
    const auto row =
        first_row("SELECT version FROM accounts WHERE user_id = " + quote(user) + " FOR UPDATE");
    if (!row) {
      return std::nullopt;
    }
    return std::stoll(row->at(0));
  }

  void set_account(const lc::JournalEvent& event,
                   const std::optional<std::string>& freeze_reason) override {
    execute("UPDATE accounts SET balance = " + std::to_string(event.balance) +
            ", version = " + std::to_string(event.version) +
            (freeze_reason ? ", freeze_reason = " + quote(*freeze_reason) : std::string()) +
            " WHERE user_id = " + quote(event.user));
  }

  void insert_order(const lc::JournalEvent& event) override {
    execute("INSERT INTO orders VALUES (" + quote(event.order) + ", " + quote(event.user) + ", " +
            quote(event.type) + ", " + std::to_string(event.amount) +
            ", 'done') ON DUPLICATE KEY UPDATE type = VALUES(type), amount = VALUES(amount)");
  }

  void roll_back_order(const lc::JournalEvent& event) override {
    execute("INSERT INTO orders VALUES (" + quote(event.order) + ", " + quote(event.user) + ", " +
            quote(event.type) + ", " + std::to_string(event.amount) +
            ", 'rolled_back') ON DUPLICATE KEY UPDATE state = 'rolled_back'");
  }

private:
  /// `text` as a string literal of this connection's character set.
  std::string quote(const std::string& text) {
    std::string escaped(text.size() * 2 + 1, '\0');
    escaped.resize(mysql_real_escape_string(db_, escaped.data(), text.data(), text.size()));
    return "'" + escaped + "'";
  }

  void execute(const std::string& sql) {
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) {
      throw std::runtime_error(std::string("mariadb: ") + mysql_error(db_) + " in " + sql);
    }
  }

  /// The first row of a query's result, each column as text (NULL as empty); empty if none.
  std::optional<std::vector<std::string>> first_row(const std::string& sql) {
    execute(sql);
    MYSQL_RES* result = mysql_store_result(db_);
    if (result == nullptr) {
      throw std::runtime_error(std::string("mariadb: ") + mysql_error(db_) + " in " + sql);
    }
    std::optional<std::vector<std::string>> first;
    if (MYSQL_ROW row = mysql_fetch_row(result)) {
      first.emplace();
      for (unsigned int i = 0; i < mysql_num_fields(result); ++i) {
        first->emplace_back(row[i] != nullptr ? row[i] : "");
      }
    }
    mysql_free_result(result);
    return first;
  }

  MYSQL* db_;
};

} // namespace

std::unique_ptr<Store> open_mariadb(const MariadbOptions& options) {
  return std::make_unique<MariadbStore>(options);
}

} // namespace billing

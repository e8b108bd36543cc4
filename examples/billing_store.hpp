#pragma once
// The billing example's system of record: accounts and orders in SQLite (embedded, the
// default) or MariaDB/MySQL (--mysql), written from the wallet journal exactly once.
//
// Exactly once without a table of applied events: each event is applied in one transaction
// that reads the account's version (locking the row) and writes the balance only if the
// event's version is newer, bumping it; its order is written by order id (an upsert), which
// the same event again leaves as it is. The journal hands a user's events in version order,
// so a redelivered or replayed event finds its version (or a later one) there and is
// acknowledged unapplied. A dead-lettered event is the exception: its user's later events go
// on without it, so when the operator applies it at last its balance is already in theirs,
// and only its order is still to write (a rollback that came first leaves its order rolled
// back).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <limitcounter/limitcounter.hpp>

namespace billing {

/// What a journal event changes besides the account's balance and version.
struct Change {
  enum class Order { none, insert, roll_back };
  Order order = Order::none;
  /// freeze: the reason; unfreeze: empty (cleared); other events: unchanged (nullopt).
  std::optional<std::string> freeze_reason;
};

/// The change `event` makes. Throws std::invalid_argument naming a type it does not know: the
/// persister fails such an event (it waits, then is dead-lettered) instead of losing it.
Change change_of(const limitcounter::JournalEvent& event);

/// One database connection, safe to share between threads (the persister and the wallet's
/// loader). Every failure throws std::runtime_error with the database's message; a failed
/// `apply` wrote nothing.
class Store {
public:
  virtual ~Store() = default;
  /// Creates the account with `snapshot` unless it exists (a later run keeps what the journal
  /// wrote).
  virtual void open_account(const std::string& user,
                            const limitcounter::AccountSnapshot& snapshot) = 0;
  /// The account as stored, for the wallet's loader; empty if there is none.
  virtual std::optional<limitcounter::AccountSnapshot> account(const std::string& user) = 0;
  /// Applies `event` in one transaction (see the top of this file). Returns whether it wrote
  /// the balance: false if the event's version is not newer than the account's (applied
  /// before, or a dead letter applied late), when only its order is written, if it is not
  /// there yet. Throws if the account does not exist.
  bool apply(const limitcounter::JournalEvent& event);
  /// Orders whose id starts with `prefix`, in `state` ("done" or "rolled_back").
  virtual std::int64_t orders(const std::string& prefix, const std::string& state) = 0;

protected:
  /// The connection's: one caller at a time (each method takes it, `apply` for its whole
  /// transaction).
  std::mutex mutex_;
  // The statements of `apply`, under `mutex_`.
  virtual void begin() = 0; ///< a transaction that writes
  virtual void commit() = 0;
  virtual void roll_back() noexcept = 0;
  /// The account's version, its row locked until the transaction ends; empty if none.
  virtual std::optional<std::int64_t> locked_version(const std::string& user) = 0;
  /// Sets the balance and version (and the freeze reason, if given) to the event's.
  virtual void set_account(const limitcounter::JournalEvent& event,
                           const std::optional<std::string>& freeze_reason) = 0;
  /// Writes a deduct's or credit's order, done, unless it is there; one its rollback wrote
  /// first gets its type and amount and stays rolled back.
  virtual void insert_order(const limitcounter::JournalEvent& event) = 0;
  /// Marks the order rolled back, writing it if its deduct or credit is not there yet (a dead
  /// letter, applied after its rollback).
  virtual void roll_back_order(const limitcounter::JournalEvent& event) = 0;
};

/// Opens the store the command line asks for and removes its options from `args`:
///   --mysql               MariaDB/MySQL; --mysql-host=, --mysql-port=, --mysql-socket=,
///                         --mysql-user=, --mysql-password=, --mysql-database= override
///                         $LIMITCOUNTER_MYSQL_HOST, _PORT, _SOCKET, _USER, _PASSWORD, _DATABASE
///                         (defaults 127.0.0.1, 3306, none, root, none, limitcounter_billing)
///   --sqlite=PATH         SQLite in PATH, kept (default: a new file in /tmp, removed on close)
/// Throws std::invalid_argument naming an option it does not know or a bad value.
std::unique_ptr<Store> open_store(std::vector<std::string>& args);

/// Where MariaDB/MySQL is (see `open_store`).
struct MariadbOptions {
  std::string host = "127.0.0.1";
  unsigned port = 3306;
  std::string socket; ///< a Unix socket instead of host and port, if set
  std::string user = "root";
  std::string password;                          ///< never printed
  std::string database = "limitcounter_billing"; ///< created if missing
};

/// The two stores (billing_store_sqlite.cpp, billing_store_mariadb.cpp). Each creates its
/// tables if they are missing.
std::unique_ptr<Store> open_sqlite(const std::string& path, bool remove_on_close);
std::unique_ptr<Store> open_mariadb(const MariadbOptions& options);

} // namespace billing

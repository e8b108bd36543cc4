#!/usr/bin/env bash
# The billing example against a real system of record (CTest label `database`): SQLite, or a
# private mariadbd (mariadb-server is installed when missing) on a free loopback port with its
# datadir under WORK_DIR. Runs billing twice against a private redis-server, emptying Redis in
# between so that the second run loads every balance from the database, and checks from
# outside that each account's balance and version in the database equal Redis's and that the
# database has every order Redis recorded, once. billing itself checks that the events
# redelivered after a lost acknowledgement, and those it replays at the end, did not apply
# again, and that the event it dead-letters reached the database. Every server it starts, it
# stops by pid; WORK_DIR is removed when the test passes.
#
#   scripts/billing_db_test.sh sqlite|mariadb BILLING_BINARY WORK_DIR
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$#" -eq 3 ] || die "usage: $0 sqlite|mariadb BILLING_BINARY WORK_DIR"
backend="$1"
billing="$2"
work="$3"
[ -x "$billing" ] || die "no billing example at $billing"

case "$backend" in
  sqlite) ensure_packages redis-server redis-tools sqlite3 ;;
  mariadb) ensure_packages redis-server redis-tools mariadb-server ;;
  *) die "unknown backend '$backend' (sqlite or mariadb)" ;;
esac
rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd)" # mariadbd resolves a relative datadir against its basedir

MARIADB_PID=""
MARIADB_SOCKET_DIR=""

mariadb_as_root=()
# mariadbd refuses to run as root unless told to (CI runs as root)
[ "$(id -u)" -ne 0 ] || mariadb_as_root=(--user=root)
mariadb_small=(--innodb-buffer-pool-size=16M --innodb-log-file-size=8M)

# start_private_mariadb: a new datadir in $work/mariadb and a mariadbd on a free loopback port
# without grant tables (any user is root); sets MARIADB_PORT and MARIADB_PID.
start_private_mariadb() {
  if ! mariadb-install-db --no-defaults "${mariadb_as_root[@]}" --datadir="$work/mariadb" \
    --auth-root-authentication-method=normal --skip-test-db "${mariadb_small[@]}" \
    >"$work/install-db.log" 2>&1; then
    tail -n 30 "$work/install-db.log" >&2
    die "mariadb-install-db failed"
  fi
  # A Unix socket's path must be short (108 bytes), so not under a deep build directory.
  MARIADB_SOCKET_DIR="$(mktemp -d "${TMPDIR:-/tmp}/limitcounter-mariadb.XXXXXX")"
  start_on_free_port mariadbd "$work/mariadbd.log" 1200 launch_private_mariadb mariadb_answers ||
    die "mariadbd did not start"
  MARIADB_PORT="$SERVER_PORT"
}

launch_private_mariadb() {
  # Commits are written to the OS at once but flushed to disk once a second: the test checks
  # nothing that needs to survive a power cut, and runs several times faster.
  mariadbd --no-defaults "${mariadb_as_root[@]}" --datadir="$work/mariadb" --port="$SERVER_PORT" \
    --bind-address=127.0.0.1 --socket="$MARIADB_SOCKET_DIR/mariadbd.sock" \
    --pid-file="$work/mariadb/mariadbd.pid" --log-error="$work/mariadbd.log" \
    --skip-grant-tables --skip-name-resolve --innodb-flush-log-at-trx-commit=2 \
    "${mariadb_small[@]}" &
  SERVER_PID=$!
  MARIADB_PID=$SERVER_PID # set at once: the EXIT trap during the wait stops it
}

mariadb_answers() {
  mariadb-admin --no-defaults -h 127.0.0.1 -P "$SERVER_PORT" -u root ping >/dev/null 2>&1
}

stop_private_mariadb() {
  if [ -n "$MARIADB_PID" ]; then
    kill "$MARIADB_PID" 2>/dev/null || true
    wait "$MARIADB_PID" 2>/dev/null || true
    MARIADB_PID=""
  fi
}

passed=0
cleanup() {
  stop_private_redis
  stop_private_mariadb
  [ -z "$MARIADB_SOCKET_DIR" ] || rm -rf "$MARIADB_SOCKET_DIR"
  if [ "$passed" -eq 1 ]; then
    rm -rf "$work"
  else
    echo "kept $work (the database and the servers' logs)" >&2
  fi
}
trap cleanup EXIT

# db_query SQL: the rows, columns separated by one space.
case "$backend" in
  sqlite)
    db="$work/billing.db"
    store_args=(--sqlite="$db")
    db_query() { sqlite3 -separator ' ' "$db" "$1"; }
    ;;
  mariadb)
    start_private_mariadb
    store_args=(--mysql --mysql-host=127.0.0.1 --mysql-port="$MARIADB_PORT" --mysql-user=root
                --mysql-database=billing_test)
    db_query() {
      mariadb --no-defaults -h 127.0.0.1 -P "$MARIADB_PORT" -u root -N -B billing_test -e "$1" |
        tr '\t' ' '
    }
    ;;
esac
start_private_redis
redis() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

# "user balance version" of every account the example cached in Redis, sorted.
redis_accounts() {
  local key
  redis --scan --pattern 'demo:wallet:*:u:*' | while IFS= read -r key; do
    echo "${key##*:u:} $(redis HMGET "$key" balance version | paste -sd ' ')"
  done | LC_ALL=C sort
}

redis_orders_total=0
check_database() {
  local run="$1" in_redis in_db orders_in_db
  in_redis="$(redis_accounts)"
  in_db="$(db_query "SELECT user_id, balance, version FROM accounts" | LC_ALL=C sort)"
  [ "$(wc -l <<<"$in_redis")" -eq 20 ] || die "run $run: Redis has $(wc -l <<<"$in_redis") accounts, not 20"
  if [ "$in_redis" != "$in_db" ]; then
    diff <(echo "$in_redis") <(echo "$in_db") >&2 || true
    die "run $run: the database's balances and versions differ from Redis's (< Redis, > database)"
  fi
  redis_orders_total=$((redis_orders_total + $(redis --scan --pattern 'demo:wallet:*:o:*' | wc -l)))
  orders_in_db="$(db_query "SELECT COUNT(*) FROM orders")"
  [ "$orders_in_db" -eq "$redis_orders_total" ] ||
    die "run $run: the database has $orders_in_db orders, Redis recorded $redis_orders_total"
  # a rollback applied before its dead-lettered deduct writes the order; the deduct completes it
  [ "$(db_query "SELECT COUNT(*) FROM orders WHERE type = 'rollback'")" -eq 0 ] ||
    die "run $run: an order written by its rollback never got its deduct or credit"
  echo "run $run: 20 accounts equal in Redis and $backend; $orders_in_db orders, once each"
}

uri="redis://127.0.0.1:$REDIS_PORT"
section "billing on $backend, run 1"
timeout 300 "$billing" "$uri" "${store_args[@]}" || die "billing failed (run 1)"
check_database 1

section "billing on $backend, run 2: Redis emptied, every balance loaded from the database"
redis FLUSHALL >/dev/null
if [ "$backend" = mariadb ]; then
  # the connection from the environment this time
  LIMITCOUNTER_MYSQL_PORT="$MARIADB_PORT" LIMITCOUNTER_MYSQL_DATABASE=billing_test \
    timeout 300 "$billing" "$uri" --mysql || die "billing failed (run 2)"
else
  timeout 300 "$billing" "$uri" "${store_args[@]}" || die "billing failed (run 2)"
fi
check_database 2
passed=1

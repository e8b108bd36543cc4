# Shared by scripts/*.sh (sourced, not run): the repository root, section headers, Debian
# packages, and a private redis-server on a free loopback port.
# shellcheck shell=bash

LIMITCOUNTER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LIMITCOUNTER_ROOT

# Everything a build needs, and what the tests, sanitizers and fuzzers need on top.
# (Used by the scripts that source this file.)
# shellcheck disable=SC2034
BUILD_PACKAGES=(build-essential cmake pkg-config libhiredis-dev libfmt-dev libhowardhinnant-date-dev libyaml-cpp-dev libcli11-dev
                libssl-dev openssl tzdata libsqlite3-dev libmariadb-dev redis-server redis-tools)
# shellcheck disable=SC2034
TEST_PACKAGES=(catch2 libbenchmark-dev clang-14 libclang-rt-14-dev redis-sentinel sqlite3
               mariadb-server)
# What scripts/bench.sh --callgrind needs to count the client's instructions.
# shellcheck disable=SC2034
PROFILE_PACKAGES=(valgrind)
# What scripts/docs.sh needs to build the API reference.
# shellcheck disable=SC2034
DOCS_PACKAGES=(doxygen)

section() { printf '\n==== %s ====\n' "$*"; }

die() {
  echo "error: $*" >&2
  exit 1
}

# ensure_packages PACKAGE...: installs those that are not installed yet (apt-get update once,
# and only when something is missing). Uses sudo when not root.
ensure_packages() {
  local missing=() package status
  for package in "$@"; do
    status="$(dpkg -s "$package" 2>/dev/null || true)"
    [[ "$status" == *"Status: install ok installed"* ]] || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0

  section "installing Debian packages: ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: install ${missing[*]} first"
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# port_is_free PORT: nothing listens on 127.0.0.1:PORT (and it is not 6379).
port_is_free() {
  local port="$1"
  [ "$port" -ne 6379 ] || return 1
  if command -v ss >/dev/null 2>&1 && [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]; then
    return 1
  fi
  # A refused connection means that nobody listens there.
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    return 1
  fi
  return 0
}

# free_port: prints a free loopback port, trying upwards from a random start in
# 20000-31999 (below the kernel's ephemeral range, so outgoing connections do not take it).
free_port() {
  local start=$((20000 + RANDOM % 12000)) i port
  for i in $(seq 0 199); do
    port=$((20000 + (start - 20000 + i) % 12000))
    if port_is_free "$port"; then
      echo "$port"
      return 0
    fi
  done
  echo "no free loopback port found" >&2
  return 1
}

# start_on_free_port NAME LOG TRIES LAUNCH READY: starts a server on a free loopback port, up
# to five ports tried. Each try sets SERVER_PORT and calls the function LAUNCH, which starts the
# server in the background on $SERVER_PORT and sets SERVER_PID; then calls the function READY
# every 0.05 s, at most TRIES times, until it succeeds. A server that exits meanwhile (its port
# taken?) or never answers is stopped, the tail of LOG printed, and another port tried.
start_on_free_port() {
  local name="$1" log="$2" tries="$3" launch="$4" ready="$5" attempt i
  for attempt in 1 2 3 4 5; do
    SERVER_PORT="$(free_port)" || return 1
    "$launch"
    for i in $(seq 1 "$tries"); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      if "$ready"; then
        echo "$name (pid $SERVER_PID) listening on 127.0.0.1:$SERVER_PORT" >&2
        return 0
      fi
      sleep 0.05
    done
    echo "$name did not come up on port $SERVER_PORT (attempt $attempt):" >&2
    tail -n 20 "$log" >&2 || true
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  done
  return 1
}

# start_private_redis [LAUNCHER...]: starts a throw-away redis-server (no persistence) on a free
# loopback port in the background, under LAUNCHER if given (e.g. valgrind and its options), and
# waits until it answers. Sets REDIS_PORT, REDIS_PID and REDIS_LOG. Pair it with
# `trap stop_private_redis EXIT`.
start_private_redis() {
  command -v redis-server >/dev/null 2>&1 || die "redis-server is not installed"
  REDIS_LAUNCHER=("$@")
  REDIS_LOG="$(mktemp "${TMPDIR:-/tmp}/limitcounter-redis.XXXXXX")"
  if ! start_on_free_port redis-server "$REDIS_LOG" 200 launch_private_redis redis_answers; then
    REDIS_PID=""
    stop_private_redis
    return 1
  fi
  # shellcheck disable=SC2034 # read by the scripts that source this file
  REDIS_PORT="$SERVER_PORT"
}

launch_private_redis() {
  "${REDIS_LAUNCHER[@]}" redis-server --port "$SERVER_PORT" --bind 127.0.0.1 --save "" \
    --appendonly no --daemonize no --protected-mode yes --logfile "" >"$REDIS_LOG" 2>&1 &
  SERVER_PID=$!
  REDIS_PID=$SERVER_PID # set at once: an EXIT trap during the wait stops it
}

redis_answers() { [ "$(redis-cli -h 127.0.0.1 -p "$SERVER_PORT" ping 2>/dev/null)" = PONG ]; }

# stop_private_redis: stops the server start_private_redis started, by its pid.
stop_private_redis() {
  if [ -n "${REDIS_PID:-}" ]; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=""
  fi
  if [ -n "${REDIS_LOG:-}" ]; then
    rm -f "$REDIS_LOG"
    REDIS_LOG=""
  fi
}

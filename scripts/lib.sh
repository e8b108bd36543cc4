# Shared by scripts/*.sh: the repository root, Debian packages, a private redis-server.
# shellcheck shell=bash

LIMITCOUNTER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LIMITCOUNTER_ROOT

section() { printf '\n==== %s ====\n' "$*"; }

# Installs the Debian packages given that are not installed yet (apt-get update once).
ensure_packages() {
  local missing=()
  local package
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  section "installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

BUILD_PACKAGES=(build-essential cmake pkg-config libhiredis-dev libfmt-dev libhowardhinnant-date-dev
                tzdata libsqlite3-dev redis-server redis-tools)
TEST_PACKAGES=(catch2 libbenchmark-dev clang-14 libclang-rt-14-dev)

# A loopback port nobody listens on (never 6379).
free_port() {
  local port
  for _ in $(seq 1 50); do
    port=$((20000 + RANDOM % 30000))
    if ! (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "no free port found" >&2
  return 1
}

# Starts a private redis-server on a free port; sets REDIS_PORT and REDIS_PID.
start_private_redis() {
  REDIS_PORT="$(free_port)"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --protected-mode no --logfile "" >/dev/null &
  REDIS_PID=$!
  for _ in $(seq 1 100); do
    if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.05
  done
  echo "redis-server did not start on port $REDIS_PORT" >&2
  return 1
}

stop_private_redis() {
  if [ -n "${REDIS_PID:-}" ]; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
    REDIS_PID=""
  fi
}

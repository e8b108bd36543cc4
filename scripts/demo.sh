#!/usr/bin/env bash
# The tour: installs what is missing, builds the examples, starts a private
# redis-server on a free port, runs every example against it, stops it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

ensure_packages "${BUILD_PACKAGES[@]}"

section "building the examples"
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DLIMITCOUNTER_BUILD_TESTS=OFF >/dev/null
cmake --build build-demo -j2

trap stop_private_redis EXIT
start_private_redis
uri="redis://127.0.0.1:$REDIS_PORT"
failed=0
for example in channel_quota payment_limits sms_daily_cap billing red_packet; do
  [ -x "build-demo/examples/$example" ] || continue
  section "$example $uri"
  if ! "build-demo/examples/$example" "$uri"; then
    echo "$example FAILED"
    failed=1
  fi
done
exit "$failed"

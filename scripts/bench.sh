#!/usr/bin/env bash
# Benchmarks: builds the driver (Release), starts a private redis-server on a free port,
# runs every scenario against it (library and raw hiredis in the same run), stops it.
#
#   scripts/bench.sh [--json] [--millis N] [--only SUBSTRING]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

ensure_packages "${BUILD_PACKAGES[@]}"
section "building the benchmark driver (Release)" >&2
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DLIMITCOUNTER_BUILD_BENCH=ON \
  -DLIMITCOUNTER_BUILD_TESTS=OFF -DLIMITCOUNTER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-bench -j2 --target limitcounter_bench >&2

trap stop_private_redis EXIT
start_private_redis
build-bench/bench/limitcounter_bench "redis://127.0.0.1:$REDIS_PORT" "$@"

#!/usr/bin/env bash
# Builds and runs every test: the main build (unit, redis, cluster, fault, packaging
# labels), then the suites again under ASan+UBSan and under TSan, then the fuzzers for a
# bounded time. Every redis-server a test starts, the test stops.
#
#   scripts/test.sh            everything
#   scripts/test.sh --quick    the main build only
#   scripts/test.sh --only main|asan|tsan|fuzz
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

stages=(main asan tsan fuzz)
case "${1:-}" in
  --quick) stages=(main) ;;
  --only) stages=("${2:?--only needs main, asan, tsan or fuzz}") ;;
  "") ;;
  *) echo "usage: $0 [--quick | --only main|asan|tsan|fuzz]" >&2; exit 2 ;;
esac

ensure_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"

# configure_build DIR [cmake args...]
configure_build() {
  local dir="$1"
  shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j2
}

run_stage() {
  case "$1" in
    main)
      section "main build (RelWithDebInfo)"
      configure_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
      ctest --test-dir build --output-on-failure -j2
      ;;
    asan)
      section "ASan + UBSan build"
      configure_build build-asan -DCMAKE_BUILD_TYPE=Debug -DLIMITCOUNTER_SANITIZE=address,undefined \
        -DLIMITCOUNTER_BUILD_EXAMPLES=OFF
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j2 -LE packaging
      ;;
    tsan)
      section "TSan build"
      configure_build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITCOUNTER_SANITIZE=thread \
        -DLIMITCOUNTER_BUILD_EXAMPLES=OFF
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        ctest --test-dir build-tsan --output-on-failure -j2 -LE packaging
      ;;
    fuzz)
      section "fuzzers (libFuzzer, clang 14, ${LIMITCOUNTER_FUZZ_SECONDS:-15} s each)"
      CXX=clang++-14 configure_build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLIMITCOUNTER_BUILD_TESTS=OFF -DLIMITCOUNTER_BUILD_EXAMPLES=OFF -DLIMITCOUNTER_INSTALL=OFF \
        -DLIMITCOUNTER_BUILD_FUZZERS=ON -DLIMITCOUNTER_SANITIZE=address,undefined
      local fuzzer
      for fuzzer in build-fuzz/fuzz/*_fuzzer; do
        echo "-- $(basename "$fuzzer")"
        "$fuzzer" -max_total_time="${LIMITCOUNTER_FUZZ_SECONDS:-15}" -artifact_prefix=build-fuzz/ \
          >build-fuzz/"$(basename "$fuzzer")".log 2>&1 || {
          tail -n 40 build-fuzz/"$(basename "$fuzzer")".log
          echo "$(basename "$fuzzer") found a failing input (saved under build-fuzz/)"
          exit 1
        }
        tail -n 1 build-fuzz/"$(basename "$fuzzer")".log
      done
      ;;
    *) echo "unknown stage $1" >&2; exit 2 ;;
  esac
}

for stage in "${stages[@]}"; do
  run_stage "$stage"
done
section "all stages passed: ${stages[*]}"

#!/usr/bin/env bash
# Builds and runs every test. Installs the Debian packages it needs when they are missing.
#
#   main  RelWithDebInfo build in build/ (the benchmark drivers too, not run), every CTest label
#         (unit, redis, cluster, fault, sentinel, simulation, packaging, database: the billing
#         example on SQLite and on a private mariadbd); prints the simulation's seeds and figures
#   docs  the API reference (scripts/docs.sh: Doxygen into build-docs/api/); fails on any warning
#   asan  ASan+UBSan build in build-asan/, every label but packaging, every Lua script behind
#         lua/check/declared_keys_guard.lua (a key a script touches outside its KEYS fails)
#   tsan  TSan build in build-tsan/, every label but packaging
#   fuzz  libFuzzer targets (clang 14, ASan+UBSan) in build-fuzz/, LIMITCOUNTER_FUZZ_SECONDS each
#
#   scripts/test.sh                     all stages
#   scripts/test.sh --quick             main and docs (no sanitizer builds, no fuzzing)
#   scripts/test.sh --only main|docs|asan|tsan|fuzz
#
# Every redis-server a test starts, the test stops. Works from any directory.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

usage() { echo "usage: $0 [--quick | --only main|docs|asan|tsan|fuzz]"; }

stages=(main docs asan tsan fuzz)
case "${1:-}" in
  "") ;;
  --quick) stages=(main docs) ;;
  --only)
    case "${2:-}" in
      main | docs | asan | tsan | fuzz) stages=("$2") ;;
      *) usage >&2; exit 2 ;;
    esac
    ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

ensure_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"

jobs=2
# The tests mostly wait on the redis-servers and clusters they start: four test binaries at a
# time on two cores (the ASan stage's tests took 140 s at two, 83 s at four).
test_jobs=4

# configure_build DIR [cmake args...]
configure_build() {
  local dir="$1"
  shift
  cmake -S . -B "$dir" "$@"
  cmake --build "$dir" -j"$jobs"
}

# run_ctest DIR [ctest args...]
run_ctest() {
  local dir="$1"
  shift
  ctest --test-dir "$dir" --output-on-failure --no-tests=error -j"$test_jobs" "$@"
}

# gcc 12's TSan cannot map its shadow memory when the kernel randomizes mmap with more than
# 28 bits; run it without address randomization there (if the sandbox allows that).
tsan_prefix=()
tsan_needs_fixed_layout() {
  local bits
  bits="$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)"
  [ "$bits" -gt 28 ] && setarch "$(uname -m)" -R true 2>/dev/null
}

# The simulation prints its seed and what it did; ctest keeps a passing test's output in its log.
print_simulation() {
  grep -h '^simulation ' "$1/Testing/Temporary/LastTest.log" || die "the simulation printed nothing"
}

# Sanitizer builds run the simulation shorter (it is several times slower there).
export LIMITCOUNTER_SIM_SECONDS="${LIMITCOUNTER_SIM_SECONDS:-50}"
sanitizer_sim_seconds=$((LIMITCOUNTER_SIM_SECONDS < 15 ? LIMITCOUNTER_SIM_SECONDS : 15))

run_stage() {
  case "$1" in
    main)
      section "main build: RelWithDebInfo in build/, all labels (and the benchmarks, built only)"
      # (scripts/bench.sh builds and runs them; built here, they keep compiling warning-free)
      configure_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITCOUNTER_BUILD_BENCH=ON
      run_ctest build
      print_simulation build
      ;;
    docs)
      # Its own section header; exits non-zero on any Doxygen warning.
      scripts/docs.sh
      ;;
    asan)
      section "ASan + UBSan build: Debug in build-asan/, all labels but packaging; every script behind the guard of declared keys"
      # (LIMITCOUNTER_CHECK_SCRIPT_KEYS: a script touching a key not in its KEYS fails its test)
      configure_build build-asan -DCMAKE_BUILD_TYPE=Debug -DLIMITCOUNTER_SANITIZE=address,undefined \
        -DLIMITCOUNTER_BUILD_EXAMPLES=OFF -DLIMITCOUNTER_CHECK_SCRIPT_KEYS=ON
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        LIMITCOUNTER_SIM_SECONDS="$sanitizer_sim_seconds" \
        run_ctest build-asan -LE packaging
      print_simulation build-asan
      ;;
    tsan)
      section "TSan build: RelWithDebInfo in build-tsan/, all labels but packaging"
      configure_build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITCOUNTER_SANITIZE=thread \
        -DLIMITCOUNTER_BUILD_EXAMPLES=OFF
      if tsan_needs_fixed_layout; then
        echo "vm.mmap_rnd_bits > 28: running the TSan tests under setarch -R"
        tsan_prefix=(setarch "$(uname -m)" -R)
      fi
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        LIMITCOUNTER_SIM_SECONDS="$sanitizer_sim_seconds" \
        "${tsan_prefix[@]}" ctest --test-dir build-tsan --output-on-failure --no-tests=error \
        -j"$test_jobs" -LE packaging
      print_simulation build-tsan
      ;;
    fuzz)
      local seconds="${LIMITCOUNTER_FUZZ_SECONDS:-15}"
      section "fuzzers: libFuzzer, clang 14, ASan+UBSan in build-fuzz/, ${seconds} s each"
      CXX=clang++-14 configure_build build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DLIMITCOUNTER_BUILD_TESTS=OFF -DLIMITCOUNTER_BUILD_EXAMPLES=OFF -DLIMITCOUNTER_INSTALL=OFF \
        -DLIMITCOUNTER_BUILD_FUZZERS=ON -DLIMITCOUNTER_SANITIZE=address,undefined
      local fuzzer name found=0
      for fuzzer in build-fuzz/fuzz/*_fuzzer; do
        [ -x "$fuzzer" ] || continue
        found=1
        name="$(basename "$fuzzer")"
        echo "-- $name"
        if ! "$fuzzer" -max_total_time="$seconds" -artifact_prefix=build-fuzz/ \
          >"build-fuzz/$name.log" 2>&1; then
          tail -n 40 "build-fuzz/$name.log"
          die "$name found a failing input (saved under build-fuzz/)"
        fi
        tail -n 1 "build-fuzz/$name.log"
      done
      [ "$found" -eq 1 ] || die "no fuzzer was built under build-fuzz/fuzz"
      ;;
  esac
}

for stage in "${stages[@]}"; do
  run_stage "$stage"
done
section "all stages passed: ${stages[*]}"

#!/usr/bin/env bash
# A longer run of the seeded simulation (label simulation): every job under faults on one
# server and on a 3-master cluster, then the auditor. Installs what is missing and builds.
#
#   scripts/soak.sh --minutes N [--seed S]    N minutes in all (half standalone, half cluster)
#
# A failing run prints its seed; --seed S replays the same operations and faults.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

usage() { echo "usage: $0 --minutes N [--seed S]"; }
minutes=""
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="${2:-}"; shift 2 ;;
    --seed) seed="${2:-}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || { usage >&2; exit 2; }
[ -z "$seed" ] || [[ "$seed" =~ ^[0-9]+$ ]] || { usage >&2; exit 2; }

ensure_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
section "building the simulation in build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIMITCOUNTER_BUILD_EXAMPLES=OFF
cmake --build build -j2 --target simulation_tests

section "soak: ${minutes} min"
export LIMITCOUNTER_SIM_SECONDS=$((minutes * 30))
if [ -n "$seed" ]; then
  export LIMITCOUNTER_SIM_SEED="$seed"
fi
build/tests/simulation_tests --order decl

#!/usr/bin/env bash
# Benchmarks: builds the driver (Release), starts a private redis-server on a free port,
# runs every scenario against it (library and raw hiredis in the same run), stops it.
#
#   scripts/bench.sh [--json] [--millis N] [--only SUBSTRING]
#   scripts/bench.sh --cluster N [--millis N]
#   scripts/bench.sh --callgrind [--only consume_N_rules]
#   scripts/bench.sh --baseline REV
#   scripts/bench.sh --server-instructions [--baseline REV]
#
# --cluster N also starts a private Redis Cluster of N masters (no replicas) on free loopback
# ports and runs the consume scenarios on it next to the standalone server, then the server
# cost of a decision on each master, then the bytes a cluster transaction keeps (home record and
# share records; see docs/BENCHMARKS.md, "Redis Cluster").
#
# --baseline REV builds bench/cost_probe.cpp of this tree twice, against the library of
# revision REV (exported with git archive) and against this tree's, runs both probes against the
# same private redis-server (flushed before each), and prints what Redis spends per limits
# transaction under each (record bytes, used_memory per transaction, CPU and script time per
# decision), then the two side by side (see docs/BENCHMARKS.md, "Before and after in one run").
#
# --server-instructions runs the cost probe's decision rounds (consume_many of 64, 1 and 4 rules;
# single 1-rule consumes) against a private redis-server running under valgrind's callgrind, and
# prints the instructions the server executed per decision: everything it ran between each
# round's CONFIG RESETSTAT and its ECHO (reading the calls, the scripts and their commands, the
# replies), ÷ the round's decisions, the least of 3 rounds; then the same for a record-less limiter
# (bench/lua/reference_gcra.lua, one call a decision), for the floor of a single consume
# (bench/lua/consume_floor.lua: only a lone consume's commands, with its keys and arguments) and
# for the least floor (bench/lua/least_consume_floor.lua: those commands under the least keys
# and arguments a consume with a record could be sent).
# Unlike CPU time, this count does not depend on what else the machine is doing. With --baseline REV, for REV's library too, each on a
# server of its own (see docs/BENCHMARKS.md, "Server instructions per decision").
#
# --callgrind runs one consume scenario (consume_4_rules unless --only names another) under
# valgrind's callgrind, counting only what runs inside LimitCounter::consume (not the bench's
# own setup of each transaction), and prints the client's instructions per consume and the
# functions that take at least 1% of them, inclusive, per consume (see docs/BENCHMARKS.md,
# "Where the client's time goes").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

MASTERS=""
CALLGRIND=""
BASELINE=""
SERVER_INSTRUCTIONS=""
ARGS=()
while [ $# -gt 0 ]; do
  if [ "$1" = --callgrind ]; then
    CALLGRIND=yes
    shift
  elif [ "$1" = --server-instructions ]; then
    SERVER_INSTRUCTIONS=yes
    shift
  elif [ "$1" = --baseline ]; then
    [ $# -ge 2 ] || die "--baseline needs a git revision"
    BASELINE="$2"
    shift 2
  elif [ "$1" = --cluster ]; then
    [ $# -ge 2 ] || die "--cluster needs a number of masters"
    MASTERS="$2"
    [[ "$MASTERS" =~ ^[1-9][0-9]?$ ]] || die "--cluster: \"$MASTERS\" is not a number of masters (1 to 99)"
    shift 2
  else
    ARGS+=("$1")
    shift
  fi
done

CLUSTER_PIDS=()
CLUSTER_PORTS=()
CLUSTER_DIR=""

# stop_private_cluster: stops the nodes start_private_cluster started, by their pids.
stop_private_cluster() {
  local pid
  for pid in "${CLUSTER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
  if [ -n "$CLUSTER_DIR" ]; then
    rm -rf "$CLUSTER_DIR"
    CLUSTER_DIR=""
  fi
}

# cluster_port: a free port whose cluster bus port (port + 10000) is free as well.
cluster_port() {
  local i port
  for i in $(seq 1 50); do
    port="$(free_port)" || return 1
    if port_is_free $((port + 10000)); then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# start_private_cluster N: N redis-server masters with cluster mode on, no persistence, joined
# into one cluster that serves all 16384 slots. `redis-cli --cluster create` needs at least
# 3 masters; for 1 or 2 the slots are split evenly with CLUSTER ADDSLOTSRANGE and the nodes
# meet with CLUSTER MEET. Each node announces 127.0.0.1: a node that never met another one
# does not know its own address and answers CLUSTER SLOTS with an empty host.
# Sets CLUSTER_PORTS and CLUSTER_PIDS.
start_private_cluster() {
  local masters="$1" i port pid ready
  CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/limitcounter-bench-cluster.XXXXXX")"
  for i in $(seq 0 $((masters - 1))); do
    port="$(cluster_port)" || die "no free loopback port pair for a cluster node"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
      --cluster-enabled yes --cluster-config-file "$CLUSTER_DIR/nodes-$port.conf" \
      --cluster-node-timeout 2000 --cluster-announce-ip 127.0.0.1 --dir "$CLUSTER_DIR" --logfile "" \
      >"$CLUSTER_DIR/$port.log" 2>&1 &
    pid=$!
    CLUSTER_PIDS+=("$pid")
    CLUSTER_PORTS+=("$port")
    for _ in $(seq 1 200); do
      kill -0 "$pid" 2>/dev/null || { tail -n 20 "$CLUSTER_DIR/$port.log" >&2; die "cluster node on $port exited"; }
      [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
      sleep 0.05
    done
  done
  if [ "$masters" -ge 3 ]; then
    local create=()
    for port in "${CLUSTER_PORTS[@]}"; do create+=("127.0.0.1:$port"); done
    redis-cli --cluster create "${create[@]}" --cluster-replicas 0 --cluster-yes \
      >"$CLUSTER_DIR/create.log" 2>&1 || { cat "$CLUSTER_DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
  else
    local per=$((16384 / masters)) first last
    for i in $(seq 0 $((masters - 1))); do
      first=$((i * per))
      last=$(( i == masters - 1 ? 16383 : (i + 1) * per - 1 ))
      redis-cli -p "${CLUSTER_PORTS[$i]}" cluster addslotsrange "$first" "$last" >/dev/null
      [ "$i" -eq 0 ] || redis-cli -p "${CLUSTER_PORTS[$i]}" cluster meet 127.0.0.1 "${CLUSTER_PORTS[0]}" >/dev/null
    done
  fi
  for port in "${CLUSTER_PORTS[@]}"; do
    ready=""
    for _ in $(seq 1 400); do
      local info
      info="$(redis-cli -p "$port" cluster info 2>/dev/null || true)"
      if [[ "$info" == *"cluster_state:ok"* && "$info" == *"cluster_known_nodes:$masters"* ]]; then
        ready=yes
        break
      fi
      sleep 0.05
    done
    [ -n "$ready" ] || die "the cluster node on $port did not reach cluster_state:ok"
  done
  echo "Redis Cluster of $masters master(s) (pids ${CLUSTER_PIDS[*]}) on ports ${CLUSTER_PORTS[*]}" >&2
}

# callgrind_profile OUT: the instructions per consume in callgrind's output file OUT, whose
# collection ran inside LimitCounter::consume only. The number of consumes is the number of
# calls its Impl's consume made to LimitCounter::Impl::decide (one each).
callgrind_profile() {
  local out="$1" calls total
  calls="$(callgrind_annotate --tree=caller "$out" 2>/dev/null |
    awk '/< .*LimitCounter::Impl::consume\(limitcounter::Transaction const&\) \([0-9,]+x\)/ { line = $0 }
         /\*  .*LimitCounter::Impl::decide\(/ && line != "" && !found {
           sub(/.*\(/, "", line); sub(/x\).*/, "", line); gsub(/,/, "", line); print line; found = 1 }
         /^$/ { line = "" }')"
  [[ "$calls" =~ ^[1-9][0-9]*$ ]] || die "no call of LimitCounter::Impl::decide from consume in $out"
  total="$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(/,/, "", $1); print $1 }')"
  echo "consumes: $calls; client instructions per consume: $((total / calls))"
  echo "inclusive instructions per consume, functions with at least 1%:"
  callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null |
    awk -v calls="$calls" -v total="$total" '
      /file:function/ { list = 1; next }             # the function list follows this line
      list && /^ *[0-9,]+ / {
        ir = $1; gsub(/,/, "", ir)
        if (ir * 100 < total) next
        name = $0; sub(/^ *[0-9,]+ \([ 0-9.]+%\)  /, "", name); sub(/ \[[^]]*\]$/, "", name)
        sub(/^[^:]*:/, "", name)                      # the source file, "???" when unknown
        if (name ~ /^(start_thread|clone|0x)|_M_run|_M_invoke|LimitCounter::(Impl::)?consume/) next
        sub(/^decltype \(.*\)\)\) /, "", name)          # a return type of decltype (...)
        gsub(/limitcounter::|std::__cxx11::|\(anonymous namespace\)::|\[abi:cxx11\]/, "", name)
        gsub(/basic_string<char, std::char_traits<char>, std::allocator<char> >/, "string", name)
        cut = index(name, "(")                        # the signature
        if (cut > 1) name = substr(name, 1, cut - 1)
        printf "%10d  %s\n", ir / calls, name
      }'
}

stop_all() {
  stop_private_cluster
  stop_private_redis
}

# probe_build NAME SOURCE: builds this tree's bench/cost_probe.cpp against the library whose
# sources are in SOURCE (as a consumer does, with add_subdirectory), in build-probe/NAME;
# prints the probe's path.
probe_build() {
  local dir="$LIMITCOUNTER_ROOT/build-probe/$1" source="$2"
  mkdir -p "$dir/consumer"
  printf '%s\n' 'cmake_minimum_required(VERSION 3.16)' 'project(limitcounter_cost_probe CXX)' \
    "add_subdirectory(\"$source\" limitcounter)" \
    "add_executable(cost_probe \"$LIMITCOUNTER_ROOT/bench/cost_probe.cpp\")" \
    'target_link_libraries(cost_probe PRIVATE limitcounter::limitcounter)' \
    >"$dir/consumer/CMakeLists.txt"
  cmake -S "$dir/consumer" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
    -DLIMITCOUNTER_RULES_FILE=OFF -DLIMITCOUNTER_LIMITCTL=OFF >/dev/null
  cmake --build "$dir/build" -j2 --target cost_probe >&2
  echo "$dir/build/cost_probe"
}

# side_by_side: reads the probes' JSON lines and prints "row.field baseline current".
side_by_side() {
  awk '{
    line = $0; gsub(/[{}"]/, "", line)
    n = split(line, pairs, /, /)
    build = ""; row = ""
    for (i = 1; i <= n; i++) {
      split(pairs[i], kv, /: /)
      if (kv[1] == "build") build = kv[2]; else if (kv[1] == "row") row = kv[2]
    }
    side = (build == "current") ? 2 : 1
    if (side == 1) label = build
    for (i = 1; i <= n; i++) {
      split(pairs[i], kv, /: /)
      if (kv[1] == "build" || kv[1] == "row") continue
      key = row "." kv[1]
      if (!(key in seen)) { seen[key] = 1; order[++count] = key }
      value[key, side] = kv[2]
    }
  }
  END {
    printf "%-48s %14s %14s\n", "", label, "current"
    for (i = 1; i <= count; i++) {
      key = order[i]
      printf "%-48s %14s %14s\n", key, ((key, 1) in value) ? value[key, 1] : "-",
             ((key, 2) in value) ? value[key, 2] : "-"
    }
  }'
}

# baseline_source REV: exports revision REV of this repository (once) into build-probe/src-SHORT;
# sets BASELINE_SHORT and BASELINE_SOURCE.
baseline_source() {
  local rev
  rev="$(git -C "$LIMITCOUNTER_ROOT" rev-parse --verify --quiet "$1^{commit}")" ||
    die "--baseline: \"$1\" is not a revision of this repository"
  BASELINE_SHORT="$(git -C "$LIMITCOUNTER_ROOT" rev-parse --short "$rev")"
  BASELINE_SOURCE="$LIMITCOUNTER_ROOT/build-probe/src-$BASELINE_SHORT"
  if [ ! -f "$BASELINE_SOURCE/CMakeLists.txt" ]; then
    rm -rf "$BASELINE_SOURCE"
    mkdir -p "$BASELINE_SOURCE"
    git -C "$LIMITCOUNTER_ROOT" archive "$rev" | tar -x -C "$BASELINE_SOURCE"
  fi
}

# server_instructions PROBE LABEL DIR [REFERENCE FLOOR LEAST]: runs PROBE's decision rounds (and,
# given the scripts, the record-less limiter's rounds and the consume floors') against a
# private redis-server under callgrind (its dumps in DIR) and prints the least instructions per
# decision of the 1-rule batch rounds, of the 4-rule batch rounds, of the single consumes (and
# of the reference's and the two floors').
server_instructions() {
  local probe="$1" label="$2" dir="$3" decisions
  start_private_redis valgrind --tool=callgrind --callgrind-out-file="$dir/server" \
    --zero-before=configResetStatCommand --dump-before=echoCommand
  decisions="$("$probe" "redis://127.0.0.1:$REDIS_PORT" "$label" --server-instructions ${4:+"$4" "$5" "$6"} |
    sed -n 's/.*"decisions_per_round": \([0-9]*\).*/\1/p')"
  stop_private_redis
  [[ "$decisions" =~ ^[1-9][0-9]*$ ]] || die "the cost probe ($label) failed under callgrind"
  # dumps 1-3: the 1-rule batch rounds, 4-6: the 4-rule batch rounds, 7-9: the single 1-rule
  # consumes, 10-12: the reference's, 13-15: the floor's, 16-18: the least floor's (the final
  # dump, at exit, is not one)
  local part totals=()
  for part in $(seq 1 $([ -n "${4:-}" ] && echo 18 || echo 9)); do
    [ -f "$dir/server.$part" ] || die "callgrind wrote no dump $part of the probe's rounds ($label)"
    totals+=("$(awk '/^totals:/ { print $2 }' "$dir/server.$part")")
  done
  rm -f "$dir"/server*
  printf '%s\n' "${totals[@]}" | awk -v label="$label" -v decisions="$decisions" '
    { ir[NR] = $1 }
    function least(from,   i, low) {
      low = ir[from]; for (i = from + 1; i < from + 3; i++) if (ir[i] < low) low = ir[i]
      return low / decisions
    }
    END {
      printf "{\"build\": \"%s\", \"row\": \"server_instructions\", " \
        "\"instructions_1_rule\": %.0f, \"instructions_4_rules\": %.0f, " \
        "\"instructions_single_consume_1_rule\": %.0f", label, least(1), least(4), least(7)
      if (NR == 18) printf ", \"record_less_limiter\": %.0f, \"single_consume_floor\": %.0f, " \
        "\"least_consume_floor\": %.0f", least(10), least(13), least(16)
      printf "}\n"
    }'
}

# run_server_instructions [REV]: server_instructions of this tree's probe (and of REV's first).
run_server_instructions() {
  local current_probe baseline_probe=""
  if [ -n "$1" ]; then
    baseline_source "$1"
    section "building the cost probe against $BASELINE_SHORT (Release)" >&2
    baseline_probe="$(probe_build "baseline-$BASELINE_SHORT" "$BASELINE_SOURCE")"
  fi
  section "building the cost probe against this tree (Release)" >&2
  current_probe="$(probe_build current "$LIMITCOUNTER_ROOT")"
  CALLGRIND_DIR="$(mktemp -d "${TMPDIR:-/tmp}/limitcounter-server-callgrind.XXXXXX")"
  PROBE_OUT="$CALLGRIND_DIR/rows"
  trap 'rm -rf "$CALLGRIND_DIR"; stop_all' EXIT
  section "Redis's instructions per decision (callgrind), batches of 64 and single consumes"
  # (not in a pipeline: a subshell would not stop the server on failure, the EXIT trap does)
  if [ -n "$baseline_probe" ]; then
    server_instructions "$baseline_probe" "baseline $BASELINE_SHORT" "$CALLGRIND_DIR" >>"$PROBE_OUT"
  fi
  server_instructions "$current_probe" current "$CALLGRIND_DIR" \
    "$LIMITCOUNTER_ROOT/bench/lua/reference_gcra.lua" \
    "$LIMITCOUNTER_ROOT/bench/lua/consume_floor.lua" \
    "$LIMITCOUNTER_ROOT/bench/lua/least_consume_floor.lua" >>"$PROBE_OUT"
  cat "$PROBE_OUT"
  [ -z "$baseline_probe" ] || side_by_side <"$PROBE_OUT"
}

# run_baseline REV: the probe of REV's library, then of this tree's, on one private server.
run_baseline() {
  local short source baseline_probe current_probe
  baseline_source "$1"
  short="$BASELINE_SHORT"
  source="$BASELINE_SOURCE"
  section "building the cost probe against $short and against this tree (Release)" >&2
  baseline_probe="$(probe_build "baseline-$short" "$source")"
  current_probe="$(probe_build current "$LIMITCOUNTER_ROOT")"
  PROBE_OUT="$(mktemp "${TMPDIR:-/tmp}/limitcounter-probe.XXXXXX")"
  trap 'rm -f "$PROBE_OUT"; stop_all' EXIT
  start_private_redis
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  "$baseline_probe" "redis://127.0.0.1:$REDIS_PORT" "baseline $short" | tee "$PROBE_OUT"
  redis-cli -p "$REDIS_PORT" flushall >/dev/null
  "$current_probe" "redis://127.0.0.1:$REDIS_PORT" current | tee -a "$PROBE_OUT"
  section "Redis's cost per limits transaction: $short and this tree"
  side_by_side <"$PROBE_OUT"
}

ensure_packages "${BUILD_PACKAGES[@]}"
[ -z "$CALLGRIND$SERVER_INSTRUCTIONS" ] || ensure_packages "${PROFILE_PACKAGES[@]}"
if [ -n "$SERVER_INSTRUCTIONS" ]; then
  run_server_instructions "$BASELINE"
  exit 0
fi
if [ -n "$BASELINE" ]; then
  run_baseline "$BASELINE"
  exit 0
fi
section "building the benchmark driver (Release)" >&2
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DLIMITCOUNTER_BUILD_BENCH=ON \
  -DLIMITCOUNTER_BUILD_TESTS=OFF -DLIMITCOUNTER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-bench -j2 --target limitcounter_bench >&2

trap stop_all EXIT
start_private_redis
if [ -n "$CALLGRIND" ]; then
  ONLY=consume_4_rules
  for ((i = 0; i < ${#ARGS[@]}; i++)); do
    [ "${ARGS[$i]}" != --only ] || ONLY="${ARGS[$((i + 1))]:-$ONLY}"
  done
  [[ "$ONLY" =~ ^consume_[0-9]+_rules$ ]] || die "--callgrind profiles consume_N_rules, not \"$ONLY\""
  OUT="$(mktemp "${TMPDIR:-/tmp}/limitcounter-callgrind.XXXXXX")"
  trap 'rm -f "$OUT"; stop_all' EXIT
  section "callgrind: $ONLY (instructions inside LimitCounter::consume)"
  valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    --toggle-collect='limitcounter::LimitCounter::consume(*' \
    build-bench/bench/limitcounter_bench "redis://127.0.0.1:$REDIS_PORT" --only "$ONLY" \
    --millis 300 >/dev/null 2>&1 || die "the benchmark failed under valgrind"
  callgrind_profile "$OUT"
  exit 0
fi
if [ -z "$MASTERS" ]; then
  build-bench/bench/limitcounter_bench "redis://127.0.0.1:$REDIS_PORT" ${ARGS[@]+"${ARGS[@]}"}
  exit 0
fi
start_private_cluster "$MASTERS"
SEEDS="$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]}")"
build-bench/bench/limitcounter_bench "redis://127.0.0.1:$REDIS_PORT" \
  --cluster "redis-cluster://${SEEDS%,}" ${ARGS[@]+"${ARGS[@]}"}

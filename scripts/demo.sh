#!/usr/bin/env bash
# The tour: installs what is missing, builds the examples (Release, in build-demo/), starts a
# private redis-server on a free loopback port, runs every example against it
# (channel_quota first), shows `limitctl usage` and `limitctl top` of channel_quota's counter,
# stops the server. Exits non-zero if any example or limitctl failed.
#
# build-demo/ rather than build/: scripts/test.sh builds build/ as RelWithDebInfo, and
# sharing the directory would rebuild everything whenever one script follows the other.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

build_dir=build-demo

ensure_packages "${BUILD_PACKAGES[@]}"

section "building the examples (Release, $build_dir/)"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLIMITCOUNTER_BUILD_TESTS=OFF \
  -DLIMITCOUNTER_BUILD_EXAMPLES=ON
cmake --build "$build_dir" -j2

# Every example binary, channel_quota (the main one) first.
examples=()
[ -x "$build_dir/examples/channel_quota" ] && examples+=("$build_dir/examples/channel_quota")
while IFS= read -r example; do
  [ "$(basename "$example")" = channel_quota ] || examples+=("$example")
done < <(find "$build_dir/examples" -maxdepth 1 -type f -perm -u+x | sort)
[ "${#examples[@]}" -gt 0 ] || die "no example was built under $build_dir/examples"

section "starting a private redis-server"
trap stop_private_redis EXIT
start_private_redis
uri="redis://127.0.0.1:$REDIS_PORT"

failed=()
for example in "${examples[@]}"; do
  name="$(basename "$example")"
  section "$name $uri"
  if ! timeout 300 "$example" "$uri"; then
    echo "$name FAILED"
    failed+=("$name")
  fi
done

# limitctl (docs/OPERATIONS.md, "limitctl") on what the tour wrote: channel_quota's counter, with the
# example's key prefix and time zone.
limitctl="$build_dir/tools/limitctl/limitctl"
if [ -x "$limitctl" ]; then
  demo_counter=(--uri "$uri" --prefix demo:trans:limit: --tz Asia/Shanghai)
  section "limitctl usage channel Ali+Deduct+cmb (channel_quota's counter)"
  "$limitctl" "${demo_counter[@]}" usage channel Ali+Deduct+cmb || failed+=("limitctl usage")
  section "limitctl top channel month --n 5"
  "$limitctl" "${demo_counter[@]}" top channel month --n 5 || failed+=("limitctl top")
else
  echo "limitctl was not built (it needs CLI11: libcli11-dev)"
  failed+=(limitctl)
fi

if [ "${#failed[@]}" -gt 0 ]; then
  section "failed: ${failed[*]}"
  exit 1
fi
section "all ${#examples[@]} examples passed"

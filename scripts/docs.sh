#!/usr/bin/env bash
# Builds the API reference from the comments of the public headers (include/limitcounter)
# with Doxygen and docs/Doxyfile, into build-docs/api/html/index.html. Installs doxygen
# when it is missing. Fails on any Doxygen warning (an undocumented member, a bad
# command), so the reference stays complete. Works from any directory.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$LIMITCOUNTER_ROOT"

ensure_packages "${DOCS_PACKAGES[@]}"

section "API reference: doxygen $(doxygen --version) into build-docs/api/"
# A fresh tree, so that no page of a removed header survives; Doxygen does not create
# the parent directories of OUTPUT_DIRECTORY itself.
rm -rf build-docs/api
mkdir -p build-docs/api
log=build-docs/doxygen-warnings.log
# WARN_AS_ERROR = FAIL_ON_WARNINGS makes doxygen exit non-zero after a warning; the log is
# checked too, so that any message on stderr fails the build whatever the version does.
status=0
doxygen docs/Doxyfile 2>"$log" || status=$?
if [ "$status" -ne 0 ] || [ -s "$log" ]; then
  cat "$log" >&2
  die "doxygen reported $(grep -c . "$log") warning(s) (exit status $status): see $log"
fi
[ -f build-docs/api/html/index.html ] || die "doxygen wrote no build-docs/api/html/index.html"
echo "API reference: build-docs/api/html/index.html"

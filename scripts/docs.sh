#!/usr/bin/env bash
# Builds the API reference from the comments of the public headers (include/limitcounter,
# and <limitcounter/version.hpp>, which CMake generates: made here from cmake/version.hpp.in)
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
mkdir -p build-docs/api build-docs/include/limitcounter
# <limitcounter/version.hpp> as CMake's configure_file makes it, with the version of
# project(limitcounter VERSION ...), without configuring a build (docs/Doxyfile reads it here).
version=$(sed -n 's/^project(limitcounter VERSION \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || die "no project(limitcounter VERSION X.Y.Z) in CMakeLists.txt"
IFS=. read -r major minor patch <<<"$version"
sed -e "s/@PROJECT_VERSION_MAJOR@/$major/" -e "s/@PROJECT_VERSION_MINOR@/$minor/" \
  -e "s/@PROJECT_VERSION_PATCH@/$patch/" -e "s/@PROJECT_VERSION@/$version/" \
  cmake/version.hpp.in >build-docs/include/limitcounter/version.hpp
! grep -n "@[A-Z_]*@" build-docs/include/limitcounter/version.hpp ||
  die "cmake/version.hpp.in has a variable docs.sh does not fill"
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

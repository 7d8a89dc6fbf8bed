#!/usr/bin/env bash
# A second configure of a build folder gives the same compile lines as the first (issue 18: the
# demo after the test command rebuilt 63 of 177 steps because CMake 3.25's FindPkgConfig moves
# libzmq's `-isystem` between configures; cmake/pkg_config_isystem.cmake). Configures a minimal
# project that links PkgConfig::ZMQ twice and compares compile_commands.json.
#   tests/first_hour/reconfigure_test.sh SOURCE_DIR [extra cmake args, e.g. -DD2K_NO_ISYSTEM_FIX=ON]
set -euo pipefail
src="$(cd "${1:?usage: reconfigure_test.sh SOURCE_DIR}" && pwd)"
shift
if ! pkg-config --cflags libzmq | grep -q -- "-isystem"; then
  echo "skipped: libzmq's pkg-config flags have no -isystem here, nothing to check"
  exit 77
fi
work="$(mktemp -d /tmp/d2k-reconfigure-XXXXXX)"
trap 'rm -rf "$work"' EXIT
configure() {
  cmake -S "$src/tests/first_hour/reconfigure" -B "$work/build" -G Ninja -DD2K_SOURCE_DIR="$src" "$@" \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
}
configure "$@"
cp "$work/build/compile_commands.json" "$work/first.json"
configure "$@"
if ! diff "$work/first.json" "$work/build/compile_commands.json"; then
  echo "FAIL: the second configure changed the compile lines (ninja would rebuild everything linking libzmq)"
  exit 1
fi
grep -q -- "-isystem " "$work/first.json"  # the case this checks was there
echo "the second configure gives the first's compile lines"

#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz_codec: protocol/codec + messages; fuzz_patch: env/patch) with
# clang, ASan and UBSan in their own build dir, and runs each for a bounded time, one process at a
# time, starting from the committed seed corpus (tests/fuzz/corpus/<harness>/, never written to).
#
#   tests/fuzz/run-libfuzzer.sh [--seconds 60] [--build-dir build-fuzz] [--only fuzz_codec|fuzz_patch]
#                               [-- extra libFuzzer flags]
#
# Needs clang with libFuzzer (Debian 12: apt-get install clang). The growing corpus and any crash,
# leak or timeout input go to <build dir>/fuzz-work/<harness>/{corpus,artifacts}/; reproduce one
# with `<build dir>/bin/<harness> <artifact file>`. Exit status: non-zero when a harness found one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds=60
build="$root/build-fuzz"
only=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run-libfuzzer.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
cc="${CLANG:-clang}"
cxx="${CLANGXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "run-libfuzzer.sh: no $cxx (Debian: apt-get install clang)" >&2
  exit 2
fi
targets=(fuzz_codec fuzz_patch)
[ -n "$only" ] && targets=("$only")
if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DD2K_FUZZ=ON -DD2K_WERROR=ON >"$build/configure.log" 2>&1 ||
    { tail -n 30 "$build/configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j "${JOBS:-1}" --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  echo "== $t: $seconds s, one process, seeds from tests/fuzz/corpus/${t#fuzz_}"
  set +e
  "$build/bin/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "${extra[@]+"${extra[@]}"}" "$work/corpus" "$here/corpus/${t#fuzz_}" \
    >"$work/last-run.log" 2>&1
  rc=$?
  set -e
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)|property violated|artifact_prefix|Test unit written" \
    "$work/last-run.log" || true
  echo "   corpus: $(ls "$work/corpus" | wc -l) inputs; artifacts: $(ls "$work/artifacts" | wc -l); exit $rc; log $work/last-run.log"
  [ "$rc" -ne 0 ] && status=1
done
exit "$status"

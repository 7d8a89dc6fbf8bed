#!/usr/bin/env bash
# CPU emulation check of the radix_sort kernels (no GPU needed), with the emulation of
# tasks/topk/bench/emu (see its README): each file runs on small arrays (one key, odd sizes, a
# partial last tile, heavy ties, all-equal keys) against std::stable_sort. The reference (CUB)
# cannot be emulated. Usage: bash tasks/radix_sort/bench/run.sh [baseline L1 L2 L3 path/to/variant.cu]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
TASK="$(dirname "$HERE")"
EMU="$TASK/../topk/bench/emu"
OUT="${TMPDIR:-/tmp}/d2k-sort-emu-$$"
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
kernels=("$@")
[ ${#kernels[@]} -eq 0 ] && kernels=(baseline L1 L2 L3)
rc=0
for k in "${kernels[@]}"; do
  case "$k" in
    *.cu) src="$(cd "$(dirname "$k")" && pwd)/$(basename "$k")"; k="$(basename "$k" .cu)" ;;
    L*) src="$TASK/experts/$k.cu" ;;
    *) src="$TASK/$k.cu" ;;
  esac
  python3 "$EMU/conv.py" "$src" "$OUT/$k.cpp" ${EMU_BLOCKS:+--arena}
  g++ -std=c++20 -O1 -w -I"$EMU" -o "$OUT/$k" "$OUT/$k.cpp" "$HERE/sort_check.cpp" -pthread
  echo "== $k"
  "$OUT/$k" || rc=1
done
exit $rc

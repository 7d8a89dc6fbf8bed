#!/usr/bin/env bash
# CPU emulation check of the topk kernels (no GPU needed): each file is turned into C++ against
# emu/cuda_runtime.h (one OS thread per CUDA thread, std::barrier for __syncthreads and for the
# warp votes and shuffles, blocks one after another) and run on small rows against std::stable_sort.
# Usage: bash tasks/topk/bench/run.sh [reference baseline L1 L2 L3]   (default: all; minutes)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
TASK="$(dirname "$HERE")"
OUT="${TMPDIR:-/tmp}/d2k-topk-emu-$$"
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
kernels=("$@")
[ ${#kernels[@]} -eq 0 ] && kernels=(reference baseline L1 L2 L3)
rc=0
for k in "${kernels[@]}"; do
  case "$k" in L*) src="$TASK/experts/$k.cu" ;; *) src="$TASK/$k.cu" ;; esac
  python3 "$HERE/emu/conv.py" "$src" "$OUT/$k.cpp"
  g++ -std=c++20 -O1 -w -I"$HERE/emu" -o "$OUT/$k" "$OUT/$k.cpp" "$HERE/topk_check.cpp" -pthread
  echo "== $k"
  "$OUT/$k" || rc=1
done
exit $rc

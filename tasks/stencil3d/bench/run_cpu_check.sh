#!/usr/bin/env bash
# Runs the reference, baseline and experts of stencil3d (and, with "moe", moe_permute's own check,
# tasks/moe_permute/bench/run_cpu_check.sh, which adds what its L3 needs to this emulation) on the
# CPU through cuda_cpu_shim.hpp against a plain C++ ground truth, on small odd grids. No GPU needed.
# Usage: tasks/stencil3d/bench/run_cpu_check.sh [moe]   (KERNELS="experts/L3.cu ..." checks only those files)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tasks=$(cd "$here/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$here/cuda_cpu_shim.hpp" "$out/"
fail=0
build() {  # $1 task, $2 kernel file (relative), $3 driver
  local name; name=$(echo "$1_$2" | tr '/.' '__')
  python3 "$here/cuda_cpu_prep.py" "$tasks/$1/$2" > "$out/$name.cpp"
  g++ -std=c++20 -O1 -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$3"
  echo "$out/$name"
}
kernels="${KERNELS:-reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu}"
for k in $kernels; do
  bin=$(build stencil3d "$k" "$here/check_stencil3d.cpp")
  for d in "13 7 5" "2 9 4" "1 1 1" "40 9 37" "36 20 13" "20 35 6" "132 17 9" "260 10 7" "508 9 5"; do
    echo -n "stencil3d $k: "; "$bin" $d || fail=1
  done
done
if [ "${1:-}" = moe ]; then
  bash "$tasks/moe_permute/bench/run_cpu_check.sh" || fail=1
fi
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

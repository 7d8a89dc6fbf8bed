#!/usr/bin/env bash
# Runs gemm_skinny's reference, baseline and experts on the CPU (through
# tasks/stencil3d/bench/cuda_cpu_shim.hpp plus cuda_cpu_extra.hpp here; the shim reports 3 SMs,
# so the split-K paths run) and compares every output with the definition in double
# (check_gemm_skinny.cpp) on small odd shapes: every M bucket (1, 4, 8, 16, 32, 64), N not a
# multiple of 8, K not a multiple of 16 or of the slice length (partial last slice). L3's inline
# PTX (TMA, mbarriers, ld.shared, mma.sync) is rewritten by emulate_l3.py into emulations of the
# PTX ISA's semantics; the hardware's agreement is checked on the H200 by `d2k verify-tasks`.
# -fno-strict-aliasing: the kernels view 16-byte vectors as bf16 pairs, as CUDA code does.
# Usage: tasks/gemm_skinny/bench/run_cpu_check.sh        (about 5 minutes on a loaded 2-core machine)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h cuda.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
fail=0
for k in reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu; do
  name=$(echo "$k" | tr '/.' '__')
  filter=cat
  [ "$k" = experts/L3.cu ] && filter="python3 $here/emulate_l3.py"
  { echo '#include "cuda_cpu_shim.hpp"'; echo '#include "cuda_cpu_extra.hpp"';
    python3 "$shim/cuda_cpu_prep.py" "$task/$k" | tail -n +2 | $filter; } > "$out/$name.cpp"
  g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_gemm_skinny.cpp"
  for s in "1 37 64" "1 5 2056" "3 41 264" "8 17 1032" "5 9 4104" "16 13 520" "33 11 1544" "64 20 1040" "2 1 8" "64 3 24"; do
    echo -n "gemm_skinny $k: "; "$out/$name" $s || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

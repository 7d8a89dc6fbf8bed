#!/usr/bin/env bash
# Runs w4a16_gemm's reference, baseline and experts on the CPU (through
# tasks/stencil3d/bench/cuda_cpu_shim.hpp plus cuda_cpu_extra.hpp here; the shim reports 3 SMs, so
# the split-K paths run) and compares every output with the definition in double
# (check_w4a16_gemm.cpp) on small odd shapes: every M bucket of the experts (1, 2-4, 5-8, 9-16,
# 17-32, 33-64) and M > 64 (token chunks), N odd or below a panel, K a multiple of 128 but not of
# 256 or of the slice length (partial last stage and slice). L3's inline PTX (TMA, mbarriers,
# ld.shared, lop3, prmt, fma.rn.bf16x2, mma.sync) is rewritten by emulate_l3.py into emulations of
# the PTX ISA's semantics; the hardware's agreement is checked on the H200 by `d2k verify-tasks`.
# -fno-strict-aliasing: the kernels view 16-byte vectors as bf16 pairs, as CUDA code does.
# Usage: tasks/w4a16_gemm/bench/run_cpu_check.sh [kernel...]   (default: all five)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h cuda.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
kernels=("$@")
[ ${#kernels[@]} = 0 ] && kernels=(reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu)
fail=0
for k in "${kernels[@]}"; do
  name=$(echo "$k" | tr '/.' '__')
  filter=cat
  [ "$k" = experts/L3.cu ] && filter="python3 $here/emulate_l3.py"
  { echo '#include "cuda_cpu_shim.hpp"'; echo '#include "cuda_cpu_extra.hpp"';
    python3 "$shim/cuda_cpu_prep.py" "$task/$k" | tail -n +2 | $filter; } > "$out/$name.cpp"
  g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_w4a16_gemm.cpp"
  for s in "1 37 1152" "3 41 384" "8 17 2176" "5 9 4224" "16 13 640" "13 150 768" "33 11 1408" "64 20 1280" "2 1 128" "70 3 256"; do
    echo -n "w4a16_gemm $k: "; "$out/$name" $s || fail=1
  done
  # The slicing of the H200's large decode workloads (one SM reported, so 8 or 9 panels are as few
  # per SM as 1002 panels on 132 SMs): before 2026-12-02 L3 gave these blocks slices of 16-32
  # stages against rings of 4-5 (the condition of its wrong results on the H200); now no block may
  # refill a ring slot (EMU_MAX_FULL_PHASES=1).
  # L3 only (the other kernels have no ring; the emulated reference takes minutes at these sizes).
  if [ "$k" = experts/L3.cu ]; then
    for s in "1 1024 8192" "16 1024 8192" "13 1031 3968"; do
      echo -n "w4a16_gemm $k (1 SM): "; EMU_SMS=1 EMU_MAX_FULL_PHASES=1 "$out/$name" $s || fail=1
    done
  fi
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

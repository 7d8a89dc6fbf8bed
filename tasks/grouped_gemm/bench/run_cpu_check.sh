#!/usr/bin/env bash
# Runs grouped_gemm's reference, baseline and experts on the CPU (through
# tasks/stencil3d/bench/cuda_cpu_shim.hpp, tasks/gemm_skinny/bench/cuda_cpu_extra.hpp and
# cuda_cpu_gg.hpp here; the shim reports 3 SMs) and compares every output with the definition in
# double (check_grouped_gemm.cpp) on small shapes with uneven and empty groups: N odd or not a
# multiple of the tiles, K a multiple of 8 but not of 64, groups ending in either half of a
# 128-row tile. The experts' inline PTX (cp.async, ldmatrix, mma.sync, TMA, mbarriers, wgmma,
# named barriers) is rewritten by emulate_gg.py into emulations of the PTX ISA's semantics; the
# hardware's agreement is checked on the H200 by `d2k verify-tasks`.
# Usage: tasks/grouped_gemm/bench/run_cpu_check.sh [kernel.cu ...]   (a few minutes on 2 cores)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
extra=$(cd "$here/../../gemm_skinny/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h cuda.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$extra/cuda_cpu_extra.hpp" "$here/cuda_cpu_gg.hpp" "$out/"
kernels=("$@")
[ ${#kernels[@]} = 0 ] && kernels=(reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu)
fail=0
for k in "${kernels[@]}"; do
  name=$(echo "$k" | tr '/.' '__')
  { echo '#include "cuda_cpu_shim.hpp"'; echo '#include "cuda_cpu_extra.hpp"'; echo '#include "cuda_cpu_gg.hpp"';
    python3 "$shim/cuda_cpu_prep.py" "$task/$k" | tail -n +2 | python3 "$here/emulate_gg.py"; } > "$out/$name.cpp"
  g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_grouped_gemm.cpp"
  for s in "5 300 264 72 1" "7 410 129 136 2" "1 130 256 64 3" "4 37 19 40 4" "3 200 520 8 5" "9 700 520 328 6" "6 500 136 264 7"; do
    echo -n "$k: "; "$out/$name" $s || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

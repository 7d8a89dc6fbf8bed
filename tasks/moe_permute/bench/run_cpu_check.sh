#!/usr/bin/env bash
# Runs moe_permute's reference, baseline and experts on the CPU through the CUDA emulation of
# ../../stencil3d/bench (cuda_cpu_prep.py, cuda_cpu_shim.hpp) plus cuda_cpu_extra.hpp (what L3 adds:
# the programmatic dependent launch, atomicInc, __ldcg), checked by check_moe_permute.cpp.
# The last shape (17,600 entries over 1,000 experts) takes L3's last-block scan through two steps.
# Usage: tasks/moe_permute/bench/run_cpu_check.sh [kernel files relative to the task, default all]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
kernels=${*:-reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu}
fail=0
for k in $kernels; do
  name=$(echo "$k" | tr '/.' '__')
  python3 "$shim/cuda_cpu_prep.py" "$task/$k" | sed -e 's/asm volatile("griddepcontrol\.[a-z_]*;" ::: "memory");//' \
    -e 's/#include "cuda_cpu_shim.hpp"/#include "cuda_cpu_extra.hpp"/' > "$out/$name.cpp"
  g++ -std=c++20 -O1 -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_moe_permute.cpp"
  for d in "7 3 64 20" "3 5 64 4099" "1 8 128 64" "37 8 16 104" "300 6 160 40" "200 2 64 24" "129 4 96 4104" "600 8 5 16" "50 16 1024 8" "1100 16 1000 8"; do
    echo -n "moe_permute $k: "; "$out/$name" $d || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

#!/usr/bin/env bash
# Runs decode_attention's reference, baseline, L1 and L2 on the CPU through the CUDA emulation of
# ../../stencil3d/bench (cuda_cpu_prep.py, cuda_cpu_shim.hpp) plus cuda_cpu_extra.hpp, checked against a
# double evaluation of the definition by check_cpu.cpp (uneven lengths, empty and 1-page sequences,
# shared unsorted pages, NaN in the unused slots of last pages). L3 (TMA, mbarriers, mma.sync) is not
# emulated: the GPU workbench (check_decode.cu) checks it.
# Usage: tasks/decode_attention/bench/run_cpu_check.sh [kernel files relative to the task]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
kernels=${*:-reference.cu baseline.cu experts/L1.cu experts/L2.cu}
fail=0
for k in $kernels; do
  name=$(echo "$k" | tr '/.' '__')
  python3 "$shim/cuda_cpu_prep.py" "$task/$k" | \
    perl -0pe 's/(__device__ __forceinline__ void cp_async16\(void\* smem, const void\* gmem\) \{).*?\n\}/$1 d2k_cp_async16(smem, gmem); }/s;
               s/__device__ __forceinline__ void cp_async_commit\(\) \{[^\n]*\}/__device__ __forceinline__ void cp_async_commit() {}/;
               s/template <int N> __device__ __forceinline__ void cp_async_wait\(\) \{[^\n]*\}/template <int N> __device__ __forceinline__ void cp_async_wait() {}/;
               s/#include "cuda_cpu_shim.hpp"/#include "cuda_cpu_shim.hpp"\n#include "cuda_cpu_extra.hpp"/' > "$out/$name.cpp"
  g++ -std=c++20 -O1 -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_cpu.cpp"
  for d in "3 8 2 9 2 0 1" "5 3 3 11 2 1 2" "4 28 4 60 9 0 3" "6 16 1 40 5 1 4" "3 5 5 20 3 2 5" "2 32 8 100 40 0 6" "1 4 2 300 130 0 7"; do
    echo -n "decode_attention $k: "; "$out/$name" $d || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

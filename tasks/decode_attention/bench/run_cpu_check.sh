#!/usr/bin/env bash
# Runs decode_attention's reference, baseline and experts on the CPU through the CUDA emulation of
# ../../stencil3d/bench (cuda_cpu_prep.py, cuda_cpu_shim.hpp), ../../gemm_skinny/bench (mbarriers, the
# TMA copy with its swizzle and mma.sync, by its emulate_l3.py) and cuda_cpu_extra.hpp (cp.async and
# ldmatrix, rewritten here; mbarrier.test_wait becomes the emulation's try_wait, a test too; L1/L2 prefetches and the programmatic-launch controls are dropped, the combine's programmatic launch refused),
# against a double evaluation of the definition by check_cpu.cpp: uneven
# lengths, empty and 1-page sequences, G from 1 to 16, shared unsorted pages, NaN in the unused slots
# of last pages. The emulation encodes our reading of the PTX ISA; the H200 checks the hardware's.
# Usage: tasks/decode_attention/bench/run_cpu_check.sh [kernel files relative to the task]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
skinny=$(cd "$here/../../gemm_skinny/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h cuda.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
cp "$skinny/cuda_cpu_extra.hpp" "$out/gemm_skinny_extra.hpp"
kernels=${*:-reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu}
fail=0
for k in $kernels; do
  name=$(echo "$k" | tr '/.' '__')
  python3 "$shim/cuda_cpu_prep.py" "$task/$k" | tail -n +2 | \
    perl -0pe 's/(__device__ __forceinline__ void cp_async16\(void\* smem, const void\* gmem\) \{).*?\n\}/$1 d2k_cp_async16(smem, gmem); }/s;
               s/__device__ __forceinline__ void cp_async_commit\(\) \{[^\n]*\}/__device__ __forceinline__ void cp_async_commit() {}/;
               s/template <int N> __device__ __forceinline__ void cp_async_wait\(\) \{[^\n]*\}/template <int N> __device__ __forceinline__ void cp_async_wait() {}/;
               s/(void ldsm_x4\(uint32_t addr, uint32_t \(&r\)\[4\]\) \{).*?\n\}/$1 emu_ldsm_x4(addr, r, false); }/s;
               s/mbarrier\.test_wait\.parity/mbarrier.try_wait.parity/g;
               s/(void prefetch_l2\(const void\* p\) \{).*?\n\}/$1 (void)p; }/s;
               s/(void prefetch_l1\(const void\* p\) \{).*?\n\}/$1 (void)p; }/s;
               s/(void pdl_trigger\(\) \{)[^\n]*\}/$1}/;
               s/(void pdl_wait\(\) \{)[^\n]*\}/$1}/;
               s/(cudaError_t launch_combine_pdl\([^)]*\) \{).*?\n\}/$1 return cudaErrorInvalidValue; }/s;
               s/(void ldsm_x4_trans\(uint32_t addr, uint32_t \(&r\)\[4\]\) \{).*?\n\}/$1 emu_ldsm_x4(addr, r, true); }/s' | \
    python3 "$skinny/emulate_l3.py" > "$out/body.cpp"
  { echo '#include "cuda_cpu_shim.hpp"'; echo '#include "cuda_cpu_extra.hpp"'; cat "$out/body.cpp"; } > "$out/$name.cpp"
  g++ -std=c++20 -O1 -fno-strict-aliasing -pthread -w -D__CUDA_ARCH_FEAT_SM90_ALL -I"$out/inc" -I"$out" \
    -o "$out/$name" "$out/$name.cpp" "$here/check_cpu.cpp"
  for d in "3 8 2 9 2 0 1" "5 3 3 11 2 1 2" "4 28 4 60 9 0 3" "6 16 1 40 5 1 4" "3 5 5 20 3 2 5" "2 32 8 100 40 0 6" "1 4 2 300 130 0 7" "70 8 2 400 3 1 8" "40 16 2 900 20 1 9"; do
    echo -n "decode_attention $k: "; "$out/$name" $d || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

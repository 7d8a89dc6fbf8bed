#!/usr/bin/env bash
# Builds the sweep's variants (any machine with nvcc): bash build.sh OUTDIR [final]
# Without "final": the variants of the first sweep (2026-12-02, before the designs were chosen);
# with it: each task's L3 as it is now ("new"), the cur builds, and a few alternatives.
# `cur` is each task's L3 as of main 2e81811 (the last verified design); the others are the task's
# experts/L3.cu with the -D switches it documents. Flags as the sandbox builds agents' kernels.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tasks=$(cd "$here/../../.." && pwd)
out=${1:?OUTDIR}
mkdir -p "$out"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
so() {  # name source flags...
  local name=$1 src=$2; shift 2
  "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -lineinfo "$@" -o "$out/$name.so" "$src"
}
so bw "$here/bw.cu"
for t in vector_add rope stencil3d moe_permute; do
  git -C "$tasks" show 2e81811:tasks/$t/experts/L3.cu > "$out/$t.cur.cu"
  so "${t}__cur" "$out/$t.cur.cu"
done
if [ "${2:-}" = final ]; then
  for t in vector_add rope stencil3d moe_permute; do so "${t}__new" "$tasks/$t/experts/L3.cu"; done
  so vector_add__onepass_no_tail "$tasks/vector_add/bench/variant.cu" -DONEPASS=1 -DHINT=0
  so vector_add__new_v2 "$tasks/vector_add/experts/L3.cu" -DVA_VECS=2
  so rope__s2_pipe_m3 "$tasks/rope/experts/L3.cu" -DRP_STEPS=2 -DRP_MINB=3
  so stencil3d__new_b1 "$tasks/stencil3d/experts/L3.cu" -DST_BUFS=1
  so stencil3d__new_a2_m4_b1 "$tasks/stencil3d/experts/L3.cu" -DST_AHEAD=2 -DST_MINB=4 -DST_BUFS=1
  so moe_permute__new_ld1_st0 "$tasks/moe_permute/experts/L3.cu" -DMP_LDCS=1 -DMP_STCS=0
  echo "built: $(ls "$out"/*.so | wc -l)"
  exit 0
fi
# The first sweep's vector_add variants came from an intermediate L3 with -DVA_WAVES (machine waves
# of 256-thread blocks) and -DVA_SPLIT (contiguous equal shares per block), now replaced (README).
so vector_add__onepass_no_tail "$tasks/vector_add/bench/variant.cu" -DONEPASS=1 -DHINT=0
L=$tasks/rope/experts/L3.cu
R0="-DRP_STEPS=4 -DRP_PIPE=0 -DRP_MINB=3 -DRP_PERSIST=0"  # the first sweep's defaults
so rope__s2_pipe "$L" $R0 -DRP_STEPS=2 -DRP_PIPE=1
so rope__s4_pipe_m2 "$L" $R0 -DRP_PIPE=1 -DRP_MINB=2
so rope__s8_m2 "$L" $R0 -DRP_STEPS=8 -DRP_MINB=2
so rope__s4_m2 "$L" $R0 -DRP_MINB=2
so rope__persist "$L" $R0 -DRP_PERSIST=1
so rope__persist_s2_pipe "$L" $R0 -DRP_PERSIST=1 -DRP_STEPS=2 -DRP_PIPE=1
so rope__s2_m4 "$L" $R0 -DRP_STEPS=2 -DRP_MINB=4
L=$tasks/stencil3d/experts/L3.cu
S0="-DST_AHEAD=3 -DST_MINB=1 -DST_BUFS=2 -DST_STCS=1"  # the first sweep's defaults
so stencil3d__a2_m4 "$L" $S0 -DST_AHEAD=2 -DST_MINB=4
so stencil3d__a3 "$L" $S0
so stencil3d__a3_m4 "$L" $S0 -DST_MINB=4
so stencil3d__a4 "$L" $S0 -DST_AHEAD=4
so stencil3d__a2_m4_cs0 "$L" $S0 -DST_AHEAD=2 -DST_MINB=4 -DST_STCS=0
so stencil3d__a3_cs0 "$L" $S0 -DST_STCS=0
so stencil3d__a2_m4_b1 "$L" $S0 -DST_AHEAD=2 -DST_MINB=4 -DST_BUFS=1
so stencil3d__a1_m5 "$L" $S0 -DST_AHEAD=1 -DST_MINB=5
# moe_permute's first-sweep builds had the rank walk one load per step (main's); these have it unrolled.
L=$tasks/moe_permute/experts/L3.cu
so moe_permute__ld0_st0 "$L" -DMP_LDCS=0 -DMP_STCS=0
so moe_permute__ld0_st1 "$L" -DMP_LDCS=0 -DMP_STCS=1
so moe_permute__ld1_st0 "$L" -DMP_LDCS=1 -DMP_STCS=0
echo "built: $(ls "$out"/*.so | wc -l)"

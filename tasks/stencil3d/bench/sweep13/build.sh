#!/usr/bin/env bash
# Builds the variants (sources under src/, flags below) in parallel: bash build.sh OUTDIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?OUTDIR}; mkdir -p "$out"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
json="{"
so() {  # task variant src flags...
  local t=$1 v=$2 src=$3; shift 3
  "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC "$@" -o "$out/${t}__$v.so" "$src" > "$out/${t}__$v.log" 2>&1 &
  cp "$src" "$out/${t}__$v.cu"
  json="$json\"${t}__$v\": {\"src\": \"${t}__$v.cu\", \"flags\": \"$*\"}, "
}
"$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o "$out/bw.so" "$here/src/bw.cu" &
S=$here/tasks/stencil3d/experts/L3.cu
K=$here/tasks/topk/experts/L3.cu
so stencil3d cur "$here/src/stencil3d.cur.cu"
so stencil3d p1 "$S" -DST_L2AHEAD=1
so stencil3d p2 "$S" -DST_L2AHEAD=2
so stencil3d p4 "$S" -DST_L2AHEAD=4
so stencil3d y0 "$S" -DST_YMARCH=1
so stencil3d y2 "$S" -DST_YMARCH=1 -DST_L2AHEAD=2
so topk cur "$here/src/topk.cur.cu"
so topk n0 "$K" -DTOPK_L2AHEAD=0
so topk b1 "$K" -DTOPK_L2AHEAD=1
so topk b2 "$K" -DTOPK_L2AHEAD=2
so topk b4 "$K" -DTOPK_L2AHEAD=4
so topk t2 "$K" -DTOPK_L2AHEAD=2 -DTOPK_L2MODE=2
so topk na "$K" -DTOPK_LDHINT=2
so topk b2na "$K" -DTOPK_L2AHEAD=2 -DTOPK_LDHINT=2
wait
echo "${json%, }}" > "$out/variants.json"
echo "built: $(ls "$out"/*.so | wc -l)"

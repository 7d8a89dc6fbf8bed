#!/usr/bin/env bash
# Builds the harness and the variants (here or there) and times them: bash tasks/vector_add/bench/run.sh OUTDIR [BUILD_ONLY]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-/tmp/vadd}"
mkdir -p "$out"
nvcc="${NVCC:-/usr/local/cuda/bin/nvcc}"
if [ ! -x "$out/harness" ]; then
  "$nvcc" -O3 -arch=sm_90 -o "$out/harness" "$here/harness.cu" -ldl
  so() { "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o "$out/$1.so" "${@:2}"; }
  for f in baseline experts/L1 experts/L2 experts/L3; do so "$(echo $f | tr / _)" "$here/../$f.cu"; done
  for u in 1 2 4 8; do for h in 0 1; do so "vec_u${u}_h${h}" -DUNROLL=$u -DHINT=$h "$here/variant.cu"; done; done
  for i in 1 2 8; do so "L2_ilp$i" -DVA_ILP=$i "$here/../experts/L2.cu"; done
  for v in 2 8; do so "L3_vecs$v" -DVA_VECS=$v "$here/../experts/L3.cu"; done
  so vec_onepass_h0 -DONEPASS=1 -DHINT=0 "$here/variant.cu"
  so vec_onepass_h1 -DONEPASS=1 -DHINT=1 "$here/variant.cu"
fi
[ "${2:-}" = "BUILD_ONLY" ] && exit 0
cd "$out"
./harness 67108864 ./*.so

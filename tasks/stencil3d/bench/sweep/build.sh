#!/usr/bin/env bash
# Builds the variants of stencil3d's and moe_permute's layer-3 experts that the sweep of
# 2026-12-02 10:12Z timed side by side on the H200 (../README.md has its figures), for
# tasks/vector_add/bench/sweep/sweep.py (any machine with nvcc; git needed): bash build.sh OUTDIR
# `<task>__cur.so` is the task's L3 as of main 1a81b30 (verified at 06:51Z); the others are the
# task's experts/L3.cu as of commit 0dbbb8f, which had the -D switches of those variants (ST_EVEN,
# ST_TXMAX, MP_CHUNK, MP_CMINB, MP_MINB; the designs not kept and their switches were removed
# after it). Also moe_permute/bench/scatter_probe.cu (a diagnostic, not run on a GPU yet).
# OUTDIR/variants.json lists each variant's source (kept in OUTDIR) and switches, for pick.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tasks=$(cd "$here/../../.." && pwd)
out=${1:?OUTDIR}
mkdir -p "$out"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
json="{"
so() {  # task variant switches...
  local t=$1 v=$2; shift 2
  local rev=0dbbb8f src="$out/$t.0dbbb8f.cu"
  [ "$v" = cur ] && rev=1a81b30 src="$out/$t.cur.cu"
  git -C "$tasks" show "$rev:tasks/$t/experts/L3.cu" > "$src"
  nice "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -lineinfo "$@" -o "$out/${t}__$v.so" "$src" &
  json="$json\"${t}__$v\": {\"src\": \"$(basename "$src")\", \"flags\": \"$*\"}, "
}
nice "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o "$out/bw.so" "$tasks/vector_add/bench/sweep/bw.cu" &
so stencil3d cur
so stencil3d e1_b2 -DST_EVEN=1 -DST_BUFS=2
wait
so stencil3d e1_b1 -DST_EVEN=1 -DST_BUFS=1
so stencil3d e0_b1 -DST_EVEN=0 -DST_BUFS=1
wait
so stencil3d e1_b2_cs0 -DST_EVEN=1 -DST_BUFS=2 -DST_STCS=0
so stencil3d e1_a2_m4 -DST_EVEN=1 -DST_BUFS=2 -DST_AHEAD=2 -DST_MINB=4
wait
so stencil3d e0_b1_t16 -DST_EVEN=0 -DST_BUFS=1 -DST_TXMAX=16
so stencil3d e0_b1_cs0 -DST_EVEN=0 -DST_BUFS=1 -DST_STCS=0
wait
so moe_permute cur
so moe_permute tab -DMP_CHUNK=1024 -DMP_CMINB=1
wait
so moe_permute tab_cm2 -DMP_CHUNK=1024 -DMP_CMINB=2
so moe_permute tab_c512 -DMP_CHUNK=512 -DMP_CMINB=1
wait
so moe_permute tab_c512_cm2 -DMP_CHUNK=512 -DMP_CMINB=2
so moe_permute tab_cm2_st0 -DMP_CHUNK=1024 -DMP_CMINB=2 -DMP_STCS=0
wait
so moe_permute tab_cm2_m12 -DMP_CHUNK=1024 -DMP_CMINB=2 -DMP_MINB=12
# A diagnostic, not a design (pick.py skips probe_*): L3's copy with the places known in advance.
nice "$nvcc" -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o "$out/moe_permute__probe_known_places.so" \
  "$tasks/moe_permute/bench/scatter_probe.cu" &
json="$json\"moe_permute__probe_known_places\": {\"src\": null, \"flags\": \"diagnostic\"}, "
wait
echo "${json%, }}" > "$out/variants.json"
echo "built: $(ls "$out"/*.so | wc -l)"

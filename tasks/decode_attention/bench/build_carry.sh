#!/usr/bin/env bash
# Builds the workbench (check_decode) and every kernel of the task as a shared object with the task's
# flags, into $1 (default: a temp dir), for a GPU machine that should not spend its time compiling.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
nvcc=${NVCC:-nvcc}
"$nvcc" -O2 -arch=sm_90a -o "$out/check_decode" "$here/check_decode.cu" -ldl &
for k in reference baseline experts/L1 experts/L2 experts/L3 $(cd "$task" && ls bench/variants/*.cu 2>/dev/null | sed "s/\.cu$//"); do
  "$nvcc" -O3 -arch=sm_90a -shared -Xcompiler -fPIC -o "$out/$(basename $k).so" "$task/$k.cu" &
done
# L3's tuning knobs: consumers, stages, blocks per SM (default 4, 3, 2).
for v in "3 4 2" "4 4 1"; do
  set -- $v
  "$nvcc" -O3 -arch=sm_90a -shared -Xcompiler -fPIC -DD2K_CONSUMERS=$1 -DD2K_STAGES=$2 -DD2K_BLOCKS_PER_SM=$3 \
    -o "$out/L3_c$1s$2b$3.so" "$task/experts/L3.cu" &
done
wait
echo "$out"

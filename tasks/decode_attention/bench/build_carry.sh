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
for k in reference baseline experts/L1 experts/L2 experts/L3; do
  "$nvcc" -O3 -arch=sm_90a -shared -Xcompiler -fPIC -o "$out/$(basename $k).so" "$task/$k.cu" &
done
wait
echo "$out"

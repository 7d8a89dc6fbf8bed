#!/usr/bin/env bash
# Runs embedding_bag's reference, baseline and experts, unchanged, on the CPU through
# tasks/stencil3d/bench's CUDA-on-CPU shim against a plain C++ ground truth (check_embedding_bag.cpp),
# on small shapes that reach every kernel path: row widths 3, 24, 128 (L3's 16-lane groups), 1001
# (odd: layer 2's kernel), 1024, 2048, 4096 (two chunks per lane) and 4104 (over 4096: layer 2's
# kernel), empty bags, bags longer than 32 and than a warp's rows in flight, misaligned pointers.
# No GPU needed; says nothing about speed. Usage: tasks/embedding_bag/bench/run_cpu_check.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tasks=$(cd "$here/../.." && pwd)
shim="$tasks/stencil3d/bench"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$out/"
fail=0
for k in reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu; do
  name=$(echo "$k" | tr '/.' '__')
  python3 "$shim/cuda_cpu_prep.py" "$tasks/embedding_bag/$k" > "$out/$name.cpp"
  g++ -std=c++20 -O1 -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_embedding_bag.cpp"
  for d in "1 3 1 3" "5 100 3 24" "37 50 20 128" "9 40 45 1001" "6 30 40 1024" "4 20 70 2048" "3 10 40 4096" \
           "2 10 9 4104" "33 60 7 128 1" "7 20 9 1024 1"; do
    echo -n "embedding_bag $k: "; "$out/$name" $d || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

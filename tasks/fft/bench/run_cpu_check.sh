#!/usr/bin/env bash
# Runs fft's reference, baseline and experts on the CPU (through
# tasks/stencil3d/bench/cuda_cpu_shim.hpp plus cuda_cpu_extra.hpp here) and compares every output
# bin with a direct DFT in long double (check_fft.cpp), on small batches of every size class:
# powers of two with an even and an odd log2 (radix-4 only / one radix-2 stage), 3 * 2^a with both
# parities, several transforms per block and a partial last block. L3's inline PTX is rewritten by
# emulate_l3.py (the bulk copies become memcpy, the mbarrier wait completes at once): its stages,
# twiddle tables and 128-bit output copy run; the PTX itself is checked on the H200 (verify-tasks).
# Usage: tasks/fft/bench/run_cpu_check.sh        (about 4 minutes on a loaded 2-core machine)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
task=$(cd "$here/.." && pwd)
shim=$(cd "$here/../../stencil3d/bench" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/inc"
for h in cuda_runtime.h cuda_bf16.h; do echo '#pragma once' > "$out/inc/$h"; done
cp "$shim/cuda_cpu_shim.hpp" "$here/cuda_cpu_extra.hpp" "$out/"
fail=0
for k in reference.cu baseline.cu experts/L1.cu experts/L2.cu experts/L3.cu; do
  name=$(echo "$k" | tr '/.' '__')
  filter=cat
  [ "$k" = experts/L3.cu ] && filter="python3 $here/emulate_l3.py"
  { echo '#include "cuda_cpu_shim.hpp"'; echo '#include "cuda_cpu_extra.hpp"';
    python3 "$shim/cuda_cpu_prep.py" "$task/$k" | tail -n +2 | $filter; } > "$out/$name.cpp"
  g++ -std=c++20 -O2 -fno-strict-aliasing -pthread -w -I"$out/inc" -I"$out" -o "$out/$name" "$out/$name.cpp" "$here/check_fft.cpp"
  for bn in "3 256" "5 384" "9 512" "2 768" "3 1536" "1 1024" "2 2048" "1 3072" "1 4096" "1 6144" "1 8192" "1 12288" "1 16384"; do
    echo -n "fft $k: "; "$out/$name" $bn || fail=1
  done
done
[ $fail = 0 ] && echo "all passed" || { echo "FAILED"; exit 1; }

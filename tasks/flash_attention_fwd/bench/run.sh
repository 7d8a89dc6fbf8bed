#!/bin/bash
# Builds, checks and times flash_attention_fwd candidates. Run from anywhere on the GPU machine:
#   bash tasks/flash_attention_fwd/bench/run.sh               # build (if nvcc) + every variant + torch SDPA
#   ONLY="fa3 fa2_mma" bash tasks/flash_attention_fwd/bench/run.sh   # a subset (names from VARIANTS below)
#   REPS=30 bash tasks/flash_attention_fwd/bench/run.sh       # timing samples (default 20)
#   QUICK=1 ...                                     # fewer checks (--quick), still times
#   BUILD_ONLY=1 BUILD=DIR bash tasks/flash_attention_fwd/bench/run.sh   # compile only (any machine with nvcc)
#   PREBUILT=1 BUILD=DIR bash tasks/flash_attention_fwd/bench/run.sh     # run what BUILD_ONLY=1 left in DIR
# The log goes to $OUT/log.txt when $OUT is set (device tool), else $BUILD/log.txt; a summary of the
# CHECK / RESULT lines ends it. Build products go to $BUILD (default /tmp/fabench), never the repo.
# Every variant runs in its own process under `timeout` (TMO, default 240 s): a hang (mbarrier
# deadlock) or a trap costs only that variant.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
B="${BUILD:-/tmp/fabench}"
mkdir -p "$B"
LOG="${OUT:-$B}/log.txt"
: > "$LOG"
NV="nvcc -O3 -gencode arch=compute_90a,code=sm_90a -shared -Xcompiler -fPIC -lineinfo"
HFLAGS=""
[ "${QUICK:-0}" = 1 ] && HFLAGS="--quick"

# name | source (relative to repo root) | extra nvcc flags
VARIANTS="
fa3|tasks/flash_attention_fwd/experts/L3.cu|
fa2_mma|tasks/flash_attention_fwd/bench/fa2_mma.cu|
fa3_st3|tasks/flash_attention_fwd/experts/L3.cu|-DFA_STAGES128=3 -DFA_STAGES64=4
fa3_headfast|tasks/flash_attention_fwd/experts/L3.cu|-DFA_HEAD_MAJOR=0
fa3_r40|tasks/flash_attention_fwd/experts/L3.cu|-DFA_PRODUCER_REGS=40 -DFA_CONSUMER_REGS=232
"

want() { [ -z "${ONLY:-}" ] && return 0; for o in $ONLY; do [ "$o" = "$1" ] && return 0; done; return 1; }

if [ "${PREBUILT:-0}" != 1 ] && command -v nvcc >/dev/null 2>&1; then
  echo "== building into $B" | tee -a "$LOG"
  nvcc -O3 -arch=sm_90 -o "$B/harness" "$HERE/harness.cu" -ldl > "$B/harness.build.txt" 2>&1 &
  while IFS='|' read -r name src flags; do
    [ -z "$name" ] && continue
    want "$name" || continue
    [ -f "$ROOT/$src" ] || { echo "skip $name: $src missing" | tee -a "$LOG"; continue; }
    $NV $flags -Xptxas -v -o "$B/$name.so" "$ROOT/$src" > "$B/$name.build.txt" 2>&1 &
  done <<< "$VARIANTS"
  wait
  for f in "$B"/*.build.txt; do
    # ptxas -v info lines are expected; show warnings/errors and the register/spill summary
    { echo "-- $(basename "$f")"; grep -E "error|warning|Used|spill|C75" "$f"; } | tee -a "$LOG"
  done
  # SASS features the task's properties look for (counts of instruction lines).
  CUOBJ="${CUOBJ:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}"
  for so in "$B"/*.so; do
    [ -x "$CUOBJ" ] || break
    "$CUOBJ" -sass "$so" > "$so.sass" 2>/dev/null || continue
    c() { grep -cE "^ +/\*[0-9a-f]{4}\*/ +($1)" "$so.sass"; }
    echo "sass $(basename "$so"): HGMMA=$(c HGMMA) HMMA=$(c HMMA) UTMALDG=$(c UTMALDG) LDGSTS=$(c LDGSTS) LDSM=$(c LDSM) LDL/STL=$(c 'LDL|STL')" | tee -a "$LOG"
    rm -f "$so.sass"
  done
else
  echo "== using prebuilt files in $B" | tee -a "$LOG"
fi
[ -x "$B/harness" ] || { echo "no harness binary in $B" | tee -a "$LOG"; exit 1; }
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "BUILD_ONLY=1: built, not run" | tee -a "$LOG"; ls -la "$B" | tee -a "$LOG"; exit 0; }

nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null | tee -a "$LOG"

while IFS='|' read -r name src flags; do
  [ -z "$name" ] && continue
  want "$name" || continue
  [ -f "$B/$name.so" ] || { echo "== $name: not built" | tee -a "$LOG"; continue; }
  echo "== $name ($src $flags)" | tee -a "$LOG"
  timeout "${TMO:-240}" "$B/harness" "$B/$name.so" "$name" $HFLAGS --reps "${REPS:-20}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  echo "rc=$rc $name" | tee -a "$LOG"
  [ "$rc" = 124 ] && echo "CHECK $name TIMEOUT (hang? mbarrier deadlock?)" | tee -a "$LOG"
done <<< "$VARIANTS"

if want torch_sdpa && [ "${NO_SDPA:-0}" != 1 ]; then
  echo "== torch_sdpa" | tee -a "$LOG"
  timeout 300 python3 "$HERE/sdpa_time.py" "${REPS:-20}" 2>&1 | tee -a "$LOG"
fi

echo | tee -a "$LOG"
echo "== summary (TFLOP/s = 4 b h s^2 d (/2 causal) / median; target >= 70% of torch SDPA per workload)" | tee -a "$LOG"
grep '^CHECK' "$LOG" > "$LOG.summary"
grep '^RESULT' "$LOG" | sort -k3,3 -k2,2 | awk '{printf "%-16s %-26s %-20s %s\n", $2, $3, $4, $6}' >> "$LOG.summary"
cat "$LOG.summary" | tee -a "$LOG" > /dev/null
cat "$LOG.summary"
rm -f "$LOG.summary"

#!/bin/bash
# Builds and measures the prefix_sum L3 candidates. Run from anywhere on the GPU machine:
#   bash tasks/prefix_sum/bench/run.sh            # everything (about 2-4 minutes)
#   ONLY="yard_L3 yard_cub" bash tasks/prefix_sum/bench/run.sh   # a subset (names from VARIANTS below)
#   REPS=50 bash tasks/prefix_sum/bench/run.sh    # more timing samples (default 30)
#   BUILD_ONLY=1 bash tasks/prefix_sum/bench/run.sh   # compile only (any machine with nvcc)
#   PREBUILT=1 BUILD=DIR bash tasks/prefix_sum/bench/run.sh  # run what BUILD_ONLY=1 left in DIR, no compiling
# Output: per-candidate check/timing lines, then a summary table. With $OUT set (device tool), a copy
# goes to $OUT/log.txt. Build products go to $BUILD (default /tmp/psbench), never into the repo.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
B="${BUILD:-/tmp/psbench}"
mkdir -p "$B"
LOG="${OUT:-$B}/log.txt"
: > "$LOG"
NV="nvcc -O3 -gencode arch=compute_90,code=sm_90 -shared -Xcompiler -fPIC -lineinfo"

# name | source (relative to repo root) | extra nvcc flags | harness flags
VARIANTS="
yard_L3|tasks/prefix_sum/experts/L3.cu||
yard_cub|tasks/prefix_sum/bench/cub_ref.cu||
L3_smem16_b3|tasks/prefix_sum/experts/L3.cu|-DPS_REG_VECS=0 -DPS_MIN_BLOCKS=3 -DPS_PREFETCH=0|
L3_blockidx|tasks/prefix_sum/experts/L3.cu|-DPS_TICKET=0 -DPS_PREFETCH=0|
b_256x32|tasks/prefix_sum/bench/cand_b_regs.cu|-DPS_THREADS=256 -DPS_VECS=8 -DPS_MIN_BLOCKS=3|
diag_b_128x24_nolb|tasks/prefix_sum/bench/cand_b_regs.cu|-DPS_THREADS=128 -DPS_VECS=6 -DPS_MIN_BLOCKS=8 -DPS_NO_LOOKBACK|--no-check
L3_reg4_b4|tasks/prefix_sum/experts/L3.cu|-DPS_REG_VECS=4 -DPS_MIN_BLOCKS=4 -DPS_PREFETCH=0|
L3_v20_reg6_b3|tasks/prefix_sum/experts/L3.cu|-DPS_VECS=20 -DPS_REG_VECS=6 -DPS_MIN_BLOCKS=3 -DPS_PREFETCH=0|
L3_v12_reg4_b5|tasks/prefix_sum/experts/L3.cu|-DPS_VECS=12 -DPS_REG_VECS=4 -DPS_MIN_BLOCKS=5 -DPS_PREFETCH=0|
L3_v12_reg6_b4|tasks/prefix_sum/experts/L3.cu|-DPS_VECS=12 -DPS_REG_VECS=6 -DPS_MIN_BLOCKS=4 -DPS_PREFETCH=0|
L3_v14_reg4_b5|tasks/prefix_sum/experts/L3.cu|-DPS_VECS=14 -DPS_REG_VECS=4 -DPS_MIN_BLOCKS=5 -DPS_PREFETCH=0|
L3_v24_reg8_b3|tasks/prefix_sum/experts/L3.cu|-DPS_VECS=24 -DPS_REG_VECS=8 -DPS_MIN_BLOCKS=3 -DPS_PREFETCH=0|
L3_lb2|tasks/prefix_sum/experts/L3.cu|-DPS_LB_ROWS=2 -DPS_PREFETCH=0|
L3_nopf|tasks/prefix_sum/experts/L3.cu|-DPS_PREFETCH=0|
trace_L3|tasks/prefix_sum/experts/L3.cu|-DPS_TRACE|--no-check
trace_nopf|tasks/prefix_sum/experts/L3.cu|-DPS_TRACE -DPS_PREFETCH=0|--no-check
trace_smem16_b3|tasks/prefix_sum/experts/L3.cu|-DPS_TRACE -DPS_REG_VECS=0 -DPS_MIN_BLOCKS=3 -DPS_PREFETCH=0|--no-check
"
# The L2 prefetch distance sweep (the expert's default is 64 tiles ahead).
for k in 8 16 32 48 96 128 160 192 256 384 528; do
  VARIANTS+="L3_pf$k|tasks/prefix_sum/experts/L3.cu|-DPS_PREFETCH=$k|"$'\n'
done

want() { [ -z "${ONLY:-}" ] && return 0; for o in $ONLY; do [ "$o" = "$1" ] && return 0; done; return 1; }

if [ "${PREBUILT:-0}" != 1 ] && command -v nvcc >/dev/null 2>&1; then
  echo "== building into $B" | tee -a "$LOG"
  nvcc -O3 -arch=sm_90 -o "$B/harness" "$HERE/harness.cu" -ldl > "$B/harness.build.txt" 2>&1 &
  while IFS='|' read -r name src flags hflags; do
    [ -z "$name" ] && continue
    want "$name" || continue
    [ -f "$ROOT/$src" ] || { echo "skip $name: $src missing" | tee -a "$LOG"; continue; }
    $NV $flags -o "$B/$name.so" "$ROOT/$src" > "$B/$name.build.txt" 2>&1 &
  done <<< "$VARIANTS"
  wait
  for f in "$B"/*.build.txt; do [ -s "$f" ] && { echo "-- $(basename "$f")"; cat "$f"; } | tee -a "$LOG"; done
else
  echo "== no nvcc: using prebuilt files in $B" | tee -a "$LOG"
fi
[ -x "$B/harness" ] || { echo "no harness binary in $B" | tee -a "$LOG"; exit 1; }
[ "${BUILD_ONLY:-0}" = 1 ] && { echo "BUILD_ONLY=1: built, not run" | tee -a "$LOG"; exit 0; }

nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null | tee -a "$LOG"
echo "== copy bandwidth" | tee -a "$LOG"
timeout 120 "$B/harness" --copy --reps "${REPS:-30}" 2>&1 | tee -a "$LOG"

while IFS='|' read -r name src flags hflags; do
  [ -z "$name" ] && continue
  want "$name" || continue
  [ -f "$B/$name.so" ] || { echo "== $name: not built" | tee -a "$LOG"; continue; }
  echo "== $name ($src $flags)" | tee -a "$LOG"
  timeout "${TMO:-180}" "$B/harness" "$B/$name.so" "$name" $hflags --reps "${REPS:-30}" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  echo "rc=$rc $name" | tee -a "$LOG"
  [ "$rc" = 124 ] && echo "CHECK $name TIMEOUT (hang? look-back deadlock?)" | tee -a "$LOG"
done <<< "$VARIANTS"

echo | tee -a "$LOG"
echo "== summary (TB/s = 8n / median; target >= 3.18 TB/s = 75% of 4.24, or 75% of the copy rate above)" | tee -a "$LOG"
grep '^CHECK' "$LOG" | tee -a "$LOG.summary"
grep '^TRACE' "$LOG" | tee -a "$LOG.summary"
grep '^RESULT' "$LOG" | awk '{printf "%-22s %-14s %-13s %-20s %-18s %s\n", $2, $3, $4, $5, $6, $7}' | tee -a "$LOG.summary"
cat "$LOG.summary" >> "$LOG"; rm -f "$LOG.summary"

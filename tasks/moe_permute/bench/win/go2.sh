#!/usr/bin/env bash
# Final window (session 13, helper moe): build moe_permute's layer-3 candidates, time them side by
# side (sweep.py), pick the best worst case over the large workloads (pick.py: the committed L3 or
# a ring variant), install it (experts/L3.cu, and for a ring its task.json properties and
# guidance/L3.md from bench/cand/ring/), then `d2k verify-tasks --seeds 3` of moe_permute, and of
# radix_sort if the time left allows. $R comes back; $D2K is the lead's d2k.
set -u
C=.carryx/moe
T=$C/tasks
M=$T/moe_permute
S=/tmp/moe_so
mkdir -p $S $R
NV=/usr/local/cuda/bin/nvcc
F="-O3 -arch=sm_90 -shared -Xcompiler -fPIC"
b() { local name=$1 src=$2; shift 2; $NV $F "$@" -o $S/$name.so $src > $S/$name.log 2>&1 || echo "BUILD FAIL $name" | tee -a $R/log.txt; }
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
b bw $C/sweep/bw.cu &
b moe_permute__cur $M/experts/L3.cu &
b moe_permute__ring_b1_l0 $M/bench/variants/L3_ring.cu -DRING_BPS=1 -DRING_LAG=0 &
b moe_permute__ring_b2_l0 $M/bench/variants/L3_ring.cu -DRING_BPS=2 -DRING_LAG=0 &
b moe_permute__ring_b1_l2 $M/bench/variants/L3_ring.cu -DRING_BPS=1 -DRING_LAG=2 &
b moe_permute__ring_b2_l2 $M/bench/variants/L3_ring.cu -DRING_BPS=2 -DRING_LAG=2 &
b moe_permute__ring_b1_l0_once $M/bench/variants/L3_ring.cu -DRING_BPS=1 -DRING_LAG=0 -DRING_ONCE=1 &
b moe_permute__lrank_tma $M/bench/variants/L3_lrank.cu &
b moe_permute__lrank_vec $M/bench/variants/L3_lrank.cu -DMP_TMA=0 &
b moe_permute__tma $M/bench/variants/L3_tma.cu &
b moe_permute__zz_cur_again $M/experts/L3.cu &
wait
echo "built at $(el) s: $(ls $S/*.so | wc -l) .so" | tee -a $R/log.txt
SWEEP_SAMPLES=9 OUT=$R timeout 40 python3 $C/sweep/sweep.py $T $S moe_permute 2>&1 | tee $R/sweep.txt | grep -v "^\[.*fan-out"
echo "sweep done at $(el) s" | tee -a $R/log.txt
python3 $M/bench/win/pick.py $R/sweep.json $M/task.json 2>&1 | tee $R/pick.txt
P=$(awk '/^PICK/ {print $2}' $R/pick.txt); P=${P:-cur}
case $P in
  ring_b*_l*)
    B=$(echo $P | sed -E 's/ring_b([0-9]+)_l([0-9]+).*/\1/'); L=$(echo $P | sed -E 's/ring_b([0-9]+)_l([0-9]+).*/\2/')
    O=0; case $P in *_once) O=1 ;; esac
    sed -e "s/^#define RING_BPS 1  /#define RING_BPS $B  /" -e "s/^#define RING_LAG 0  /#define RING_LAG $L  /" \
      -e "s/^#define RING_ONCE 0  /#define RING_ONCE $O  /" $M/bench/variants/L3_ring.cu > $M/experts/L3.cu
    cp $M/bench/cand/ring/task.json $M/task.json
    cp $M/bench/cand/ring/L3.md $M/guidance/L3.md ;;
esac
echo "picked $P at $(el) s" | tee -a $R/log.txt
mkdir -p $R/installed; cp $M/experts/L3.cu $M/task.json $M/guidance/L3.md $R/installed/
timeout 120 $D2K verify-tasks --tasks $T --task moe_permute --seeds 3 --results-dir $R/tasks > $R/verify_moe.txt 2>&1
echo "verify moe_permute rc=$? at $(el) s" | tee -a $R/log.txt
grep -A12 "^### Speed of light" $R/verify_moe.txt | head -14
grep -E "^\| (ladder|speed of light|correct|property)" $R/verify_moe.txt | cut -c1-160
left=$(( ${BUDGET:-200} - $(el) - 5 ))
if [ $left -ge 75 ]; then
  timeout $left $D2K verify-tasks --tasks $T --task radix_sort --seeds 3 --results-dir $R/tasks > $R/verify_radix.txt 2>&1
  echo "verify radix_sort rc=$? at $(el) s" | tee -a $R/log.txt
  tail -4 $R/verify_radix.txt
else
  echo "radix_sort verify skipped: $left s left" | tee -a $R/log.txt
fi

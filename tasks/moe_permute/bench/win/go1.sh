#!/usr/bin/env bash
# Window 1 (session 13, helper moe): build variants on the GPU machine, time them side by side with
# tasks/vector_add/bench/sweep/sweep.py, then verify-tasks (L3 only, 1 seed) of moe_permute with
# bench/variants/L3_lrank.cu as its L3. Runs from the repository root; $R comes back, $D2K is the lead's d2k.
set -u
C=.carryx/moe
T=$C/tasks
S=/tmp/moe_so
mkdir -p $S $R
NV=/usr/local/cuda/bin/nvcc
F="-O3 -arch=sm_90 -shared -Xcompiler -fPIC"
b() { local name=$1 src=$2; shift 2; $NV $F "$@" -o $S/$name.so $src > $S/$name.log 2>&1 || echo "BUILD FAIL $name" | tee -a $R/log.txt; }
t0=$(date +%s)
b bw $C/sweep/bw.cu &
M=$T/moe_permute
b moe_permute__cur $M/experts/L3.cu &
b moe_permute__tma $M/bench/variants/L3_tma.cu &
b moe_permute__tma_one_issuer $M/bench/variants/L3_tma.cu -DMP_ONE_ISSUER=1 &
b moe_permute__lrank_tma $M/bench/variants/L3_lrank.cu &
b moe_permute__lrank_tma_nohint $M/bench/variants/L3_lrank.cu -DMP_HINT=0 &
b moe_permute__lrank_vec $M/bench/variants/L3_lrank.cu -DMP_TMA=0 &
b moe_permute__lrank_ring $M/bench/variants/L3_lrank.cu -DMP_TMA=2 -DMP_RING_BPS=1 &
b moe_permute__lrank_ring2 $M/bench/variants/L3_lrank.cu -DMP_TMA=2 -DMP_RING_BPS=2 &
b moe_permute__probe_known_reg $M/bench/scatter_probe.cu &
b moe_permute__probe_known_tma $M/bench/scatter_probe.cu -DPROBE_TMA=1 &
b moe_permute__probe_known_tma_persist $M/bench/scatter_probe.cu -DPROBE_TMA=2 -DPROBE_BPS=1 &
b moe_permute__probe_known_tma_persist2 $M/bench/scatter_probe.cu -DPROBE_TMA=2 -DPROBE_BPS=2 &
Q=$T/radix_sort
b radix_sort__cur $Q/experts/L3.cu &
b radix_sort__cub $Q/bench/variants/cub_onesweep.cu &
sed 's/for (int pass = 0; pass < kPasses; ++pass)/for (int pass = 0; pass < RS_STOP; ++pass)/' $Q/experts/L3.cu > /tmp/rs_stop.cu
b radix_sort__diag_stop0_hist_only /tmp/rs_stop.cu -DRS_STOP=0 &
b radix_sort__diag_stop1_hist_1pass /tmp/rs_stop.cu -DRS_STOP=1 &
b radix_sort__i12_m3 $Q/experts/L3.cu -DRS_ITEMS=12 -DRS_MINB=3 &
b radix_sort__i20_m2 $Q/experts/L3.cu -DRS_ITEMS=20 -DRS_MINB=2 &
wait
echo "built in $(( $(date +%s) - t0 )) s: $(ls $S/*.so | wc -l) .so" | tee -a $R/log.txt
cat $S/*.log > $R/build.log 2>/dev/null
# Two runs: the persistent (ring) designs last, in their own process, so that a fault or a hang
# there cannot take the other variants' figures with it.
S2=/tmp/moe_so2; mkdir -p $S2; cp $S/bw.so $S/moe_permute__cur.so $S2/
for f in $S/moe_permute__*ring*.so $S/moe_permute__*persist*.so; do mv $f $S2/; done
SWEEP_SAMPLES=11 OUT=$R timeout 75 python3 $C/sweep/sweep.py $T $S moe_permute radix_sort 2>&1 | tee $R/sweep.txt
mkdir -p $R/ring; SWEEP_SAMPLES=11 OUT=$R/ring timeout 45 python3 $C/sweep/sweep.py $T $S2 moe_permute 2>&1 | tee $R/sweep_ring.txt
echo "sweep done at $(( $(date +%s) - t0 )) s" | tee -a $R/log.txt
timeout 85 $D2K verify-tasks --tasks $C/vt --task moe_permute --seeds 1 --kernels L3 --results-dir $R/vt > $R/vt.txt 2>&1
echo "verify rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $R/log.txt
find $R/vt -name "*.md" | head; find $R/vt -name RESULTS.md -exec grep -E "^[|] (qwen|deepseek|top2|odd)" {} + | head -30

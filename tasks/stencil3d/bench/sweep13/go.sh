#!/usr/bin/env bash
# stencil helper, final window: build the L2-prefetch variants, sweep them, pick the best per task
# (worst large workload), then the full verify-tasks --seeds 3 of both tasks with the picked L3s.
set -u
C=.carryx/stencil
export PATH=/usr/local/cuda/bin:$PATH
T0=$(date +%s)
mkdir -p $R/so $R/picked
bash $C/build.sh $R/so > $R/build.txt 2>&1; tail -1 $R/build.txt
echo "build done $(( $(date +%s) - T0 ))s"
SWEEP_SAMPLES=11 OUT=$R timeout 45 python3 $C/sweep.py $C/tasks $R/so stencil3d topk > $R/sweep.txt 2>&1
grep -E "copy bandwidth|stencil3d|topk" $R/sweep.txt | grep -v fan-out
echo "sweep done $(( $(date +%s) - T0 ))s"
python3 $C/pick13.py $R/sweep.json $R/so/variants.json $C/tasks $R/so 2>&1 | tee $R/pick.txt
cp $C/tasks/stencil3d/experts/L3.cu $R/picked/stencil3d_L3.cu; cp $C/tasks/topk/experts/L3.cu $R/picked/topk_L3.cu
rm -f $R/so/*.so
left=$(( 195 - ($(date +%s) - T0) ))
echo "verify with ${left}s left"
timeout $((left - 2)) $D2K verify-tasks --tasks $C/tasks --task topk --task stencil3d --seeds 3 --gpu-resident --results-dir $R/tasks --time-budget $((left - 40)) > $R/log.txt 2>&1
echo "verify rc=$?"
grep -E "µs|copy bandwidth|evaluating|FAIL|PASS" $R/log.txt | grep -vE "property (on|new)" | head -90
echo "end $(( $(date +%s) - T0 ))s"

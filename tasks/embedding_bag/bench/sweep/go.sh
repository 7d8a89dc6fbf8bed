#!/bin/bash
# tasks-c's one device call (embedding_bag, stencil3d): a parameter sweep of the experts (seeds 1),
# each layer's fastest parameter picked (gen.py), then the real `d2k verify-tasks` on the result.
cd "$(dirname "$0")/../.."
C=$PWD/.tasksc/.carryx
T0=$SECONDS
tar -xJf $C/gpu.tar.xz
D2K_GPU_PARTS=none bash scripts/gpu-check.sh > /tmp/setup.log 2>&1
B=$(cat .carry/gpu/BUILD_DIR); S=$(cat .carry/gpu/SOURCE_DIR); export LD_LIBRARY_PATH=$PWD/.carry/gpu/lib
rm -rf tasks/embedding_bag tasks/stencil3d && cp -r $C/tasks/embedding_bag $C/tasks/stencil3d tasks/
echo "setup $((SECONDS - T0)) s; tasks at $S/tasks"; ls $S/tasks/embedding_bag/experts
SW=${SW:-75}
python3 $C/gen.py sweep tasks /tmp/vt
[ "$SW" -gt 0 ] && timeout $SW $B/bin/d2k verify-tasks --gpu-resident --jobs 8 --seeds 1 --tasks /tmp/vt --task eb_x --task eb_y \
  --task st_x --task st_y --results-dir /tmp/vtres --time-budget $((SW - 15)) > $OUT/sweep.log 2>&1
echo "sweep rc=$? at $((SECONDS - T0)) s"
python3 $C/gen.py final tasks $OUT/sweep.log > $OUT/choice.txt 2>&1; cat $OUT/choice.txt
left=$((${BUDGET:-193} - (SECONDS - T0)))
timeout $left $B/bin/d2k verify-tasks --gpu-resident --jobs 8 --tasks $S/tasks --task embedding_bag --task stencil3d \
  --results-dir $OUT/tasks --time-budget $((left - 25)) > $OUT/verify.log 2>&1
echo "verify rc=$? at $((SECONDS - T0)) s"
tar czf $OUT/final.tgz tasks/embedding_bag tasks/stencil3d
grep -E "^  evaluating|µs|WRONG" $OUT/sweep.log | cut -c1-120
grep -E "PASS|FAIL|ladder|speed of light|% of copy" $OUT/verify.log | cut -c1-260

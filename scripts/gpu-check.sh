#!/usr/bin/env bash
# The one GPU check, for the H200 machine (device tool), in a single call.
#
#   here (development machine, no GPU):
#     scripts/gpu-check.sh --pack [BUILD_DIR]
#       copies what the GPU tests need from an existing build (binaries stripped, CTest files, the
#       exploit kernels, the shared libraries the GPU machine may lack) into .carry/gpu (ignored).
#   there (device call with carry [".carry"], from the repository root):
#     bash scripts/gpu-check.sh
#       recreates the build's absolute paths, runs every GPU test (ctest -L gpu) and, when the
#       build has it, `d2k verify-tasks`; the full log goes to $OUT/gpu-check.log.
#     D2K_GPU_PARTS="verify" bash scripts/gpu-check.sh [TASK...]
#       only `d2k verify-tasks`, one task at a time (each task's report lands in
#       $OUT/tasks/<task>/RESULTS.md as soon as it is done, so a call cut short keeps what
#       finished; `cp -r $OUT/tasks/. tasks/` puts each beside its task). Parts: any of
#       "kernel tests verify demo bench" (default: all; kernel = the Landlock/seccomp CPU tests run
#       on the GPU machine's kernel).
#     The bench part also runs the task workbenches tasks/prefix_sum/bench and
#     tasks/flash_attention_fwd/bench from what --pack compiled into .carry/bench-* (their logs go
#     into gpu-check.log); ONLY=... selects their variants.
#   One call cannot hold everything any more (9 tasks × ~1.5 min of verify-tasks, ~2.5 min of GPU
#   tests, the benches): split by parts and task names, e.g.
#     D2K_GPU_PARTS="tests verify" bash scripts/gpu-check.sh prefix_sum flash_attention_fwd
set -o pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PACK="$ROOT/.carry/gpu"

if [ "${1:-}" = "--pack" ]; then
  set -e
  BUILD="$(cd "${2:-$ROOT/build}" && pwd)"
  rm -rf "$PACK"
  mkdir -p "$PACK/build/bin" "$PACK/lib"
  echo "$BUILD" > "$PACK/BUILD_DIR"
  echo "$ROOT" > "$PACK/SOURCE_DIR"
  (cd "$BUILD" && find . \( -name CTestTestfile.cmake -o -name DartConfiguration.tcl \) -exec cp --parents {} "$PACK/build/" \;)
  # Only what runs there: the GPU tests' binaries, the server and runner, the example client, the
  # benches and the tenant tests (issue 22's attacks on that machine's cores: bench_tenants,
  # env_tenants_test "[fair]", env_scheduler_test) (the device call's tree is limited in size).
  for f in "$BUILD"/bin/*; do
    [ -x "$f" ] || continue
    case "$(basename "$f")" in
      d2k|d2k-runner|d2k_sandbox_probe|example_*|*gpu*|*exploits*|bench_*|d2k_runner_confine_test|d2k_sandbox_seccomp_test|d2k_runner_hardening_test|env_tenants_test|env_scheduler_test) ;;
      *) continue ;;
    esac
    strip -o "$PACK/build/bin/$(basename "$f")" "$f"
    # Shared libraries beside glibc/libstdc++/CUDA's own, which the GPU machine may lack (libzmq…).
    ldd "$f" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*|libcuda.so*|ld-linux*) ;;
        *) cp -Ln "$lib" "$PACK/lib/" ;;
      esac
    done
  done
  if [ -d "$BUILD/tests/exploits/kernels" ]; then
    mkdir -p "$PACK/build/tests/exploits/kernels"
    for so in "$BUILD"/tests/exploits/kernels/*.so; do strip -g -o "$PACK/build/tests/exploits/kernels/$(basename "$so")" "$so"; done
  fi
  # The agent tools' test kernels (tests/tools/kernels): unstripped, their line information is
  # what sanitize reports.
  if [ -d "$BUILD/tests/tools/kernels" ]; then
    mkdir -p "$PACK/build/tests/tools/kernels"
    cp "$BUILD"/tests/tools/kernels/*.so "$PACK/build/tests/tools/kernels/"
  fi
  # The task workbenches (prefix_sum look-back variants, flash attention candidates), compiled here
  # so the GPU machine only runs them (D2K_PACK_BENCH=0 skips this; about a minute).
  if [ "${D2K_PACK_BENCH:-1}" = 1 ] && command -v nvcc >/dev/null 2>&1; then
    for b in prefix_sum flash_attention_fwd; do
      dir="$ROOT/.carry/bench-$b"
      rm -rf "$dir"
      BUILD_ONLY=1 BUILD="$dir" OUT= bash "$ROOT/tasks/$b/bench/run.sh" > /dev/null 2>&1 ||
        echo "tasks/$b/bench: build failed (see $dir)"
      rm -f "$dir"/*.build.txt "$dir"/log.txt
      for so in "$dir"/*.so; do [ -f "$so" ] && strip --strip-unneeded "$so"; done
      [ -f "$dir/harness" ] && strip "$dir/harness"
    done
  fi
  du -sh "$ROOT"/.carry/*
  exit 0
fi

OUT="${OUT:-/tmp/gpu-check-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
{
  echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
  [ -f "$PACK/BUILD_DIR" ] || { echo "no $PACK: run scripts/gpu-check.sh --pack here first and carry .carry"; exit 2; }
  BUILD="$(cat "$PACK/BUILD_DIR")"
  SRC="$(cat "$PACK/SOURCE_DIR")"
  # The tests carry absolute paths of the machine they were built on: recreate them here.
  if [ "$SRC" != "$ROOT" ]; then
    if [ ! -e "$SRC" ]; then mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC"; fi
  fi
  mkdir -p "$BUILD"
  cp -a "$PACK/build/." "$BUILD/"
  export LD_LIBRARY_PATH="$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  rc=0
  PARTS=" ${D2K_GPU_PARTS:-kernel tests verify demo bench} "
  part() { [[ "$PARTS" == *" $1 "* ]]; }
  if part kernel; then
    # CPU tests whose subject is the kernel (Landlock, seccomp filters): run them on this one's.
    for t in d2k_runner_confine_test d2k_sandbox_seccomp_test d2k_runner_hardening_test; do
      [ -x "$BUILD/bin/$t" ] || continue
      echo "== $t (on $(uname -r))"
      "$BUILD/bin/$t" || rc=$?
    done
  fi
  if part tests; then
    echo "== ctest -L gpu ($BUILD)"
    ctest --test-dir "$BUILD" -L gpu --output-on-failure -V --timeout 600 || rc=$?
  fi
  if part verify && [ -x "$BUILD/bin/d2k" ] && "$BUILD/bin/d2k" --help 2>&1 | grep -q verify-tasks; then
    tasks=("$@")
    if [ ${#tasks[@]} -eq 0 ]; then
      for d in "$SRC"/tasks/*/; do [ -f "$d/task.json" ] && tasks+=("$(basename "$d")"); done
    fi
    for t in "${tasks[@]}"; do
      echo "== d2k verify-tasks --task $t ($(date -u +%H:%M:%S))"
      "$BUILD/bin/d2k" verify-tasks --tasks "$SRC/tasks" --task "$t" --results-dir "$OUT/tasks" || rc=$?
    done
  elif part verify; then
    echo "== d2k verify-tasks: not in this build (skipped)"
  fi
  if part demo && [ -x "$BUILD/bin/d2k" ]; then
    echo "== d2k demo (server, runner backend, reward)"
    (cd "$SRC" && XDG_CACHE_HOME="$OUT/.demo-cache" "$BUILD/bin/d2k" demo --layer 1) || rc=$?
    rm -rf "$OUT/.demo-cache"
  fi
  if part bench && [ -x "$ROOT/.carry/vadd/harness" ]; then
    echo "== vector_add variants (tasks/vector_add/bench)"
    (cd "$ROOT/.carry/vadd" && ./harness 67108864 ./*.so) || true
  fi
  for b in prefix_sum flash_attention_fwd; do
    if part bench && [ -x "$ROOT/.carry/bench-$b/harness" ]; then
      # Its log goes into this one (the device call brings back at most 8 files).
      echo "== tasks/$b/bench (prebuilt in .carry/bench-$b)"
      tmp="$(mktemp -d)"
      OUT="$tmp" PREBUILT=1 BUILD="$ROOT/.carry/bench-$b" bash "$ROOT/tasks/$b/bench/run.sh" > /dev/null 2>&1 || true
      cat "$tmp/log.txt" 2>/dev/null
      rm -rf "$tmp"
    fi
  done
  if part bench && [ -x "$BUILD/bin/bench_gpu" ] && [ "${D2K_GPU_BENCH:-1}" = 1 ]; then
    echo "== bench_gpu (one GPU)"
    # Its figures also go to $OUT/bench_gpu.txt (bench/README.md records them).
    (cd "$SRC" && CUDA_VISIBLE_DEVICES=0 "$BUILD/bin/bench_gpu" --runs 20 --sessions 32 --seconds 45 2>&1 |
      tee "$OUT/bench_gpu.txt") || true
  fi
  echo "== gpu-check done, rc=$rc"
  exit $rc
} 2>&1 | tee "$LOG"

#!/usr/bin/env bash
# Installs what this machine lacks (Debian packages), then configures and builds into build/.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libseccomp-dev nlohmann-json3-dev catch2 libcli11-dev
  libxxhash-dev libsqlite3-dev libffi-dev libspdlog-dev
  chromium fonts-dejavu-core)  # headless Chromium renders `d2k report --html` in the tests
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
if [ ! -x "$nvcc" ]; then
  echo "bootstrap: the CUDA toolkit (nvcc) is needed and was not found at $nvcc" >&2
  exit 1
fi
export PATH="$(dirname "$nvcc"):$PATH"

# cuobjdump (the SASS of the tasks' kernels, checked by test_tasks_nvcc) is not in every toolkit
# install: take NVIDIA's wheel from PyPI when neither PATH nor the toolkit has it.
cuobjdump_args=()
if ! command -v cuobjdump >/dev/null && [ ! -x "$(dirname "$nvcc")/cuobjdump" ]; then
  deps=.deps/cuobjdump
  if [ ! -x "$deps/nvidia/cu13/bin/cuobjdump" ]; then
    echo "bootstrap: fetching cuobjdump (pip wheels nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)"
    python3 -m pip download --quiet --no-deps -d .deps/wheels "nvidia-cuda-cuobjdump==13.*" "nvidia-cuda-nvdisasm==13.*" &&
      python3 -c 'import sys, zipfile, glob
for w in glob.glob(".deps/wheels/nvidia_cuda_*.whl"): zipfile.ZipFile(w).extractall(sys.argv[1])' "$deps" &&
      chmod +x "$deps"/nvidia/cu13/bin/* || echo "bootstrap: cuobjdump unavailable; SASS checks will be skipped" >&2
  fi
  [ -x "$deps/nvidia/cu13/bin/cuobjdump" ] && cuobjdump_args=(-DD2K_CUOBJDUMP="$PWD/$deps/nvidia/cu13/bin/cuobjdump")
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DD2K_WERROR="${D2K_WERROR:-OFF}" "${cuobjdump_args[@]}" >/dev/null
cmake --build build -j"$jobs"

#!/usr/bin/env bash
# Installs what this machine lacks (Debian packages, the project's Python environment .venv/),
# then configures and builds into build/. Used by scripts/demo.sh and scripts/test.sh; safe to run
# again (it only installs what is missing, and a second run rebuilds only what changed).
#
# One build folder, one set of options: warnings are errors (D2K_WERROR=ON) in every build this
# script makes, the demo's as well as the tests', so running one command after the other never
# recompiles anything. D2K_WERROR=OFF in the environment turns that off for a build (e.g. with a
# newer compiler than Debian 12's that warns about something new); it is then kept in
# build/CMakeCache.txt until given again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config ccache
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libseccomp-dev nlohmann-json3-dev catch2 libcli11-dev
  libxxhash-dev libsqlite3-dev libffi-dev libspdlog-dev
  iproute2  # `ip netns` + veth for the CURVE test over a non-loopback address (python/tests/test_curve.py)
  python3 python3-venv  # the project's Python environment (.venv/; Debian's pip refuses system installs)
  chromium fonts-dejavu-core)  # headless Chromium renders `d2k report --html` in the tests
echo "bootstrap: checking the Debian packages"
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

bash scripts/python-env.sh

# cuobjdump (the SASS of the tasks' kernels, checked by test_tasks_nvcc) is not in every toolkit
# install: take NVIDIA's wheel from PyPI when neither PATH nor the toolkit has it.
cuobjdump_args=()
if ! command -v cuobjdump >/dev/null && [ ! -x "$(dirname "$nvcc")/cuobjdump" ]; then
  deps=.deps/cuobjdump
  if [ ! -x "$deps/nvidia/cu13/bin/cuobjdump" ]; then
    echo "bootstrap: fetching cuobjdump (pip wheels nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)"
    .venv/bin/python -m pip download --quiet --no-deps -d .deps/wheels "nvidia-cuda-cuobjdump==13.*" "nvidia-cuda-nvdisasm==13.*" &&
      .venv/bin/python -c 'import sys, zipfile, glob
for w in glob.glob(".deps/wheels/nvidia_cuda_*.whl"): zipfile.ZipFile(w).extractall(sys.argv[1])' "$deps" &&
      chmod +x "$deps"/nvidia/cu13/bin/* || echo "bootstrap: cuobjdump unavailable; SASS checks will be skipped" >&2
  fi
  [ -x "$deps/nvidia/cu13/bin/cuobjdump" ] && cuobjdump_args=(-DD2K_CUOBJDUMP="$PWD/$deps/nvidia/cu13/bin/cuobjdump")
fi

# The compiler cache, when installed, makes a rebuild after `git pull` or in a second folder fast.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
werror=()
if [ -n "${D2K_WERROR:-}" ]; then
  werror=(-DD2K_WERROR="$D2K_WERROR")
elif [ ! -f build/CMakeCache.txt ]; then
  werror=(-DD2K_WERROR=ON)
fi
mkdir -p build
echo "bootstrap: configuring build/"
cmake -S . -B build -G Ninja "${werror[@]}" "${launcher[@]}" "${cuobjdump_args[@]}" >build/.configure.log 2>&1 ||
  { cat build/.configure.log >&2; exit 1; }
jobs=$(nproc)
echo "bootstrap: building build/ with $jobs jobs (only what changed; a first build compiles the server, the GPU" \
  "runner, every test and the nvcc test kernels, which takes long on a small machine)"
cmake --build build -j"$jobs"

#!/usr/bin/env bash
# Installs what this machine lacks (Debian packages), then configures and builds into build/.
# Used by scripts/demo.sh and scripts/test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libseccomp-dev nlohmann-json3-dev catch2 libcli11-dev
  libxxhash-dev libsqlite3-dev libffi-dev
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

jobs=$(nproc)
cmake -S . -B build -G Ninja -DD2K_WERROR="${D2K_WERROR:-OFF}" >/dev/null
cmake --build build -j"$jobs"

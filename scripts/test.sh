#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors and runs every test (C++ via CTest, the
# Python client via pytest). GPU tests skip with a message where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
D2K_WERROR=ON bash scripts/bootstrap.sh
ctest --test-dir build --output-on-failure -j2 --timeout 900
if [ -f python/run-tests.sh ]; then
  bash python/run-tests.sh
fi

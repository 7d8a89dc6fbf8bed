#!/usr/bin/env bash
# Installs what is missing, builds with warnings as errors (the same build/ as scripts/demo.sh: one
# never rebuilds the other's work) and runs every test: C++ via CTest, then the protocol
# conformance suite and the Python client's tests via pytest in the project environment .venv/. GPU tests show as skipped where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
echo "test: the C++ tests (ctest)"
ctest --test-dir build --output-on-failure -j2 --timeout 900
echo "test: the protocol conformance suite (tests/conformance, against the built server)"
D2K_PYTHON="$PWD/.venv/bin/python" bash tests/conformance/run.sh
if [ -f python/run-tests.sh ]; then
  echo "test: the Python tests (pytest, against a real d2k serve)"
  bash python/run-tests.sh
fi

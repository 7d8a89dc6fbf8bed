#!/usr/bin/env bash
# The project's Python: a virtual environment in .venv/ (ignored by git) with the client's
# dependencies, so nothing is installed into the system Python (Debian 12 refuses that: PEP 668).
# Safe to run again: it only creates or installs what is missing. Prints nothing when all is there.
#   D2K_PYTHON  the interpreter that creates .venv (default: python3 on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
base="${D2K_PYTHON:-python3}"
# A folder without a working pip (e.g. left by `python3 -m venv` before python3-venv was
# installed) is made again.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  echo "python: creating the project environment $venv ($("$base" --version 2>&1))"
  rm -rf "$venv"
  if ! "$base" -m venv "$venv"; then
    echo "python: '$base -m venv' failed; on Debian install python3-venv (apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# The client's dependencies (python/pyproject.toml) and pytest; the package itself runs from
# python/ (PYTHONPATH), so the server is never built twice.
if ! "$venv/bin/python" -c 'import zmq, msgpack, gymnasium, numpy, pytest' 2>/dev/null; then
  echo "python: installing pyzmq msgpack gymnasium numpy pytest into $venv"
  "$venv/bin/python" -m pip install --quiet "pyzmq>=25" "msgpack>=1.0" "gymnasium>=1.0" "numpy>=1.24" "pytest>=7"
fi

#!/usr/bin/env bash
# Runs one of this folder's Python programs (soak.py, protofuzz.py, checker_selftest.py) with a
# Python that has pyzmq and msgpack: $D2K_PYTHON, else the project's .venv/ (scripts/python-env.sh),
# else tests/conformance/.venv/. Exits 77 (CTest: skipped) when none is found.
#   tests/fuzz/run-live.sh soak.py --sessions 1000 --duration 1200
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
for py in "${D2K_PYTHON:-}" "$root/.venv/bin/python" "$root/tests/conformance/.venv/bin/python"; do
  if [ -n "$py" ] && [ -x "$py" ] && "$py" -c 'import zmq, msgpack' 2>/dev/null; then
    script="$1"; shift
    exec "$py" "$here/$script" "$@"
  fi
done
echo "run-live.sh: no Python with pyzmq and msgpack (run scripts/python-env.sh, or set D2K_PYTHON); skipped" >&2
exit 77

#!/usr/bin/env bash
# Runs the Python package's tests against a real `d2k serve` (started by the pytest fixture).
#   D2K_BIN        server binary (default <repo>/build/bin/d2k)
#   D2K_TASKS_DIR  tasks folder (default <repo>/tasks)
# Installs the package's dependencies when missing. Server tests FAIL (not skip) when the
# binary is missing, because D2K_REQUIRE_SERVER=1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -c 'import zmq, msgpack, gymnasium, pytest' 2>/dev/null ||
  python3 -m pip install --quiet pyzmq msgpack gymnasium pytest
export D2K_REQUIRE_SERVER="${D2K_REQUIRE_SERVER:-1}"
cd "$here"
exec python3 -m pytest -q -p no:cacheprovider tests "$@"

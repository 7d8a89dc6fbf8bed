#!/usr/bin/env bash
# Runs the Python package's tests against a real `d2k serve` (started by the pytest fixture).
#   D2K_BIN        server binary (default <repo>/build/bin/d2k)
#   D2K_TASKS_DIR  tasks folder (default <repo>/tasks)
# Runs in the project's Python environment <repo>/.venv (created by scripts/python-env.sh with the
# package's dependencies when missing; the system Python is never installed into). Server tests
# FAIL (not skip) when the binary is missing, because D2K_REQUIRE_SERVER=1.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/../scripts/python-env.sh"
python="$here/../.venv/bin/python"
export D2K_REQUIRE_SERVER="${D2K_REQUIRE_SERVER:-1}"
cd "$here"
exec "$python" -m pytest -q -p no:cacheprovider tests "$@"

#!/usr/bin/env bash
# `pip install ./python` is the whole set-up of a Python user (issue 18): into a fresh virtual
# environment it builds the server and the runner (scikit-build-core, CMake underneath), bundles
# them with the tasks, and leaves nothing behind in the checkout; then, from a folder outside the
# checkout, `d2k.make("vector_add", layer=1)` without an endpoint starts the installed server, which
# says whether it has a GPU and compiles in its sandbox.
#
#   tests/first_hour/pip_install_test.sh SOURCE_DIR
#
# Opt-in (CTest shows it as skipped otherwise): D2K_TEST_PIP_INSTALL=1. It downloads the build
# backend and the package's dependencies from PyPI and compiles the server once more, in release
# mode (32 minutes on this project's 2-core machine while others built too, 12 CPU-minutes, the
# compiler cache cold for release flags; 5 minutes with it warm), which the test command must not
# do on every run. With ccache, export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
# CMAKE_CUDA_COMPILER_LAUNCHER=ccache first: CMake takes them from the environment.
#   D2K_PYTHON  the interpreter that makes the venv (default python3: on Debian the system Python)
set -euo pipefail
src="$(cd "${1:?usage: pip_install_test.sh SOURCE_DIR}" && pwd)"
if [ "${D2K_TEST_PIP_INSTALL:-0}" != 1 ]; then
  echo "skipped: set D2K_TEST_PIP_INSTALL=1 to build and install the package into a fresh venv"
  exit 77
fi
python="${D2K_PYTHON:-python3}"
work="$(mktemp -d /tmp/d2k-pip-test-XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

listing() { (cd "$src" && ls -A . python); }
before="$(listing)"

echo "== $python -m venv; pip install -v ./python (log: the last lines on failure)"
"$python" -m venv "$work/v"
start=$(date +%s)
if ! (cd "$src" && "$work/v/bin/pip" install -v ./python) >"$work/pip.log" 2>&1; then
  tail -n 60 "$work/pip.log"
  fail "pip install ./python failed"
fi
echo "pip install took $(($(date +%s) - start)) s"
# -v shows the build's progress: CMake's configure and ninja's [n/N] lines.
grep -q -- "-- Configuring done" "$work/pip.log" || fail "no CMake output in pip -v's log"
grep -Eq '^ *\[[0-9]+/[0-9]+\] ' "$work/pip.log" || fail "no ninja progress lines in pip -v's log"

echo "== nothing left in the checkout"
after="$(listing)"
[ ! -e "$src/python/build" ] || fail "python/build/ was left in the checkout"
if [ "$before" != "$after" ]; then
  diff <(echo "$before") <(echo "$after") || true
  fail "pip install ./python changed the checkout's top-level entries"
fi

echo "== the installed package: server, runner, tasks"
site="$(cd "$work" && "$work/v/bin/python" -c 'import d2k, os; print(os.path.dirname(d2k.__file__))')"
case "$site" in "$work/v/"*) ;; *) fail "d2k imported from $site, not from the venv" ;; esac
[ -x "$site/bin/d2k" ] || fail "no $site/bin/d2k"
[ -x "$site/libexec/d2k/d2k-runner" ] || fail "no $site/libexec/d2k/d2k-runner"
[ -f "$site/tasks/vector_add/task.json" ] || fail "no tasks in $site/tasks"
# The installed runner runs (it lists the GPUs; none here is an answer too).
probe="$(timeout 120 "$site/libexec/d2k/d2k-runner" --mode probe --result-fd 1)" || fail "the runner's probe failed"
echo "runner probe: $probe"
case "$probe" in *'"event":"probe"'*) ;; *) fail "no probe answer from the installed runner" ;; esac

echo "== d2k.make without an endpoint, outside the checkout"
(cd "$work" && env -u D2K_BIN -u D2K_TASKS_DIR -u D2K_ENDPOINT -u D2K_RUNNER -u PYTHONPATH \
  "$work/v/bin/python" - "$site" <<'PY'
import json, os, sys
from pathlib import Path

import gymnasium as gym

import d2k
from d2k.local import find_server_binary
from d2k.registration import default_tasks_dir

site = Path(sys.argv[1])
assert find_server_binary() == site / "bin" / "d2k", find_server_binary()
assert default_tasks_dir() == site / "tasks", default_tasks_dir()
assert "d2k/vector_add-L1-v0" in gym.registry

env = d2k.make("vector_add", layer=1)
try:
    server = env.server
    assert server is not None and server.binary == site / "bin" / "d2k", server.binary
    assert server.tasks_dir == site / "tasks", server.tasks_dir
    gpus = server.hello["gpus"]
    print("server:", server.binary, "gpus:", [g.get("name") for g in gpus] or "none")
    obs, info = env.reset(seed=0)
    assert info["layer"] == 1 and d2k.parse_observation(obs)["task"]["id"] == "vector_add"
    _, reward, _, _, info = env.step({"type": "compile"})
    assert info["ok"], info
    print("compile of the starter: ok, reward", reward)
    log = server.log_tail()
    if not gpus:
        assert "compile only" in log, log  # the server says it has no GPU
        _, _, _, _, info = env.step({"type": "evaluate"})
        assert info["error"] == "no_gpu", info
        print("evaluate without a GPU: no_gpu")
    else:
        _, reward, _, _, info = env.step({"type": "evaluate"})
        assert info["ok"], info  # the installed server found the installed runner
        print("evaluate on", gpus[0].get("name"), ": ok, reward", reward)
finally:
    env.close()
print("OK")
PY
) || fail "the installed package's embedded server"
echo "pip install test passed"

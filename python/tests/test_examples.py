"""The examples in examples/python run against a real server and print what they promise."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

EXAMPLES = REPO / "examples" / "python"


def run(script, server, *args, timeout=30):
    env = dict(os.environ, D2K_ENDPOINT=server.endpoint, PYTHONPATH=str(REPO / "python"))
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_minimal_client(server, task_id):
    out = run("minimal_client.py", server, "--task", task_id)
    assert out.returncode == 0, out.stderr
    assert "compile ok=" in out.stdout and "closed: closed" in out.stdout
    if not server.has_gpu:
        assert "compile-only" in out.stdout


def test_rl_loop_small(server, task_id):
    out = run("rl_loop.py", server, "--task", task_id, "--episodes", "8", timeout=60)
    assert out.returncode == 0, out.stderr
    assert "8 episodes in" in out.stdout
    assert "mean return" in out.stdout
    if not server.has_gpu:
        assert "compile-only" in out.stdout

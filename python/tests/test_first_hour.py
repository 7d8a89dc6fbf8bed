"""What a new Python user meets first (issue 18): ids registered by ``import d2k`` from an
installed package, the embedded server of ``d2k.make``/``gymnasium.make`` without an endpoint,
``env.render()``, and a too-large request refused at once."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import d2k
from conftest import REPO, server_binary, tasks_dir

BROKEN = "extern \"C\" int d2k_vector_add(const float* a) { return undefined_name; }\n"


def test_import_registers_ids_from_the_tasks_bundled_in_an_installed_package(tmp_path):
    """The layout `pip install ./python` makes: site-packages/d2k with the tasks in d2k/tasks,
    no checkout around it."""
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "python" / "d2k", site / "d2k",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(tasks_dir() / "softmax", site / "d2k" / "tasks" / "softmax")
    env = {k: v for k, v in os.environ.items() if k not in ("D2K_TASKS_DIR", "PYTHONPATH")}
    code = ("import gymnasium, d2k; "
            "print(d2k.registration.default_tasks_dir()); "
            "print('d2k/softmax-L2-v0' in gymnasium.registry)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=dict(env, PYTHONPATH=str(site)),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines == [str(site / "d2k" / "tasks"), "True"]


@pytest.fixture()
def no_endpoint(monkeypatch):
    """No $D2K_ENDPOINT, the test build's server binary as D2K_BIN."""
    monkeypatch.delenv("D2K_ENDPOINT", raising=False)
    monkeypatch.setenv("D2K_BIN", str(server_binary()))
    monkeypatch.setenv("D2K_TASKS_DIR", str(tasks_dir()))


def test_make_without_endpoint_starts_and_stops_a_private_server(server, task_id, no_endpoint):
    env = d2k.make(task_id, layer=1)
    local = env.server
    try:
        assert local is not None and local.running
        assert local.endpoint.startswith("ipc://")
        assert env.client.endpoint == local.endpoint
        obs, info = env.reset(seed=2)
        assert info["layer"] == 1 and d2k.parse_observation(obs)["task"]["id"] == task_id
        _, _, _, _, info = env.step({"type": "compile"})
        assert info["step"] == 1
    finally:
        env.close()
    assert not local.running and env.server is None
    assert not local.dir.exists()  # the socket and the log are gone with it


def test_gymnasium_make_without_endpoint_uses_a_private_server(server, task_id, no_endpoint):
    d2k.register_task(task_id)
    env = gym.make(f"d2k/{task_id}-L2-v0")
    local = env.unwrapped.server
    try:
        assert local is not None and local.running
        obs, info = env.reset(seed=0)
        assert info["layer"] == 2 and len(d2k.parse_observation(obs)["guidance"]) == 2
    finally:
        env.close()
    assert not local.running


def test_an_endpoint_uses_the_running_server_instead(server, task_id, monkeypatch):
    monkeypatch.setenv("D2K_ENDPOINT", server.endpoint)
    env = d2k.make(task_id)
    try:
        assert env.server is None and env.client.endpoint == server.endpoint
    finally:
        env.close()


def test_d2k_bin_that_does_not_exist_is_an_error_not_a_fallback(monkeypatch, tmp_path):
    monkeypatch.delenv("D2K_ENDPOINT", raising=False)
    monkeypatch.setenv("D2K_BIN", str(tmp_path / "nothing"))
    with pytest.raises(d2k.ServerNotFound, match="is not an executable file"):
        d2k.make("vector_add")


def test_render_shows_diagnostics_reward_and_diff(server, task_id):
    env = d2k.KernelEnv(task_id, endpoint=server.endpoint, render_mode="ansi")
    try:
        env.reset(seed=5)
        text = env.render()
        assert "last: (no step yet)" in text and "diff since reset: (none)" in text
        main_file = env.raw_observation["task"]["main_file"]
        env.step({"type": "write_file", "path": main_file, "content": BROKEN})
        _, reward, _, _, _ = env.step({"type": "compile"})
        text = env.render()
        assert "last: compile failed" in text
        assert "compile FAILED" in text
        assert f"{main_file}:" in text and "error" in text  # a diagnostic with its place
        assert f"reward {reward:.4g}" in text
        assert f"+++ b/{main_file}" in text and "+" + BROKEN.strip() in text
        # a request refused on this side shows as such
        env.step({"type": "write_file", "path": main_file, "content": "x" * (300 << 10)})
        assert "too_large" in env.render()
    finally:
        env.close()


def test_render_human_prints(server, task_id, capsys):
    env = d2k.KernelEnv(task_id, endpoint=server.endpoint, render_mode="human")
    try:
        env.reset(seed=5)
        assert env.render() is None
        assert f"d2k {task_id} L0" in capsys.readouterr().out
    finally:
        env.close()


def test_a_write_over_the_message_limit_is_refused_at_once(server, task_id, client):
    limit = client.limits()["max_message_bytes"]
    assert limit == server.hello["limits"]["max_message_bytes"]
    with client.reset(task_id) as session:
        start = time.monotonic()
        with pytest.raises(d2k.TooLarge, match="hello.limits.max_message_bytes"):
            session.write_file("kernel.cu", "x" * (50 << 20))
        assert time.monotonic() - start < 5
        with pytest.raises(d2k.TooLarge) as err:
            session.write_file("kernel.cu", "x" * (300 << 10))  # over max_file_bytes
        assert err.value.field == "action.content"
        assert session.write_file("kernel.cu", "// small\n").ok  # nothing reached the server


def test_the_gym_env_observes_a_too_large_write_at_once(server, task_id):
    env = d2k.KernelEnv(task_id, endpoint=server.endpoint)
    try:
        env.reset(seed=1)
        start = time.monotonic()
        _, reward, terminated, truncated, info = env.step(
            {"type": "write_file", "path": "kernel.cu", "content": "x" * (50 << 20)})
        assert time.monotonic() - start < 5
        assert info["request_error"] == "too_large" and reward == pytest.approx(-0.1)
        assert not terminated and not truncated
    finally:
        env.close()


async def _async_too_large(endpoint: str, task: str) -> float:
    async with d2k.AsyncClient(endpoint) as client:
        async with await client.reset(task) as session:
            start = time.monotonic()
            with pytest.raises(d2k.TooLarge):
                await session.write_file("kernel.cu", "x" * (50 << 20))
            return time.monotonic() - start


def test_the_async_client_refuses_a_too_large_write_at_once(server, task_id):
    import asyncio
    assert asyncio.run(_async_too_large(server.endpoint, task_id)) < 5

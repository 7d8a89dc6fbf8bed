"""The OpenEnv-compatible server (d2k.adapters.openenv) end to end, with a scripted policy.

Needs openenv-core (pip install './python[openenv]'); skipped without it. A real uvicorn server
in a thread in front of the test's `d2k serve`; OpenEnv's own GenericEnvClient over WebSocket
(what EnvClient-based trainers use) and plain HTTP with a named episode.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("openenv.core", reason="needs openenv-core: pip install './python[openenv]'")
uvicorn = pytest.importorskip("uvicorn", reason="needs uvicorn: pip install './python[openenv]'")
requests = pytest.importorskip("requests", reason="needs requests (an openenv-core dependency)")

from openenv.core import GenericEnvClient  # noqa: E402

from d2k.adapters.openenv import make_app  # noqa: E402

KERNEL = """#include <cuda_runtime.h>
__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }
"""


@pytest.fixture()
def openenv_url(server, task_id):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = make_app(server.endpoint, task_id, 0, max_concurrent_envs=4)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


def scripted_policy(step: int, observation: dict) -> dict:
    """Write a file, break it, fix it with an edit, compile: what an agent does, fixed."""
    return [{"type": "write_file", "path": "scratch.cu", "content": KERNEL},
            {"type": "edit", "path": "scratch.cu", "old": "+= 1.0f", "new": "+= 2.0f"},
            {"type": "edit", "path": "scratch.cu", "old": "not there", "new": "x"},
            {"type": "write_file", "path": "../escape.cu", "content": "x"},
            {"type": "compile"},
            {"type": "submit"}][step]


def test_openenv_websocket_client(server, openenv_url):
    with GenericEnvClient(base_url=openenv_url).sync() as env:
        result = env.reset(seed=3)
        obs = result.observation
        assert obs["session"] and obs["status"]["step"] == 0 and not result.done
        assert obs["task"]["id"] and obs["files"]  # the task statement and the starter workspace
        rewards, outcomes = [], []
        for i in range(6):
            result = env.step(scripted_policy(i, obs))
            obs = result.observation
            rewards.append(result.reward)
            outcomes.append((obs["last"] or {}).get("ok"))
            if result.done:
                break
        # write ok, edit ok, edit of absent text fails, path escape fails, compile ok (a step),
        # submit on a compile-only server: refused before running -> truncated, as KernelEnv does
        assert outcomes[:4] == [True, True, False, False], outcomes
        assert obs["files"]["scratch.cu"].count("+= 2.0f") == 1
        assert rewards[2] < 0 and rewards[3] < 0  # d2k's failure reward, not an invented one
        session = obs["session"]
        assert result.done
        if not server.has_gpu:
            assert obs["last"]["error"]["code"] == "no_gpu"
    # The WebSocket ended: its d2k session is closed with it (by the server, once it sees the end).
    import d2k
    with d2k.Client(server.endpoint) as c:
        deadline = time.monotonic() + 20
        while True:
            try:
                c.observe(session)
            except d2k.UnknownSession:
                break
            assert time.monotonic() < deadline, "the d2k session outlived its WebSocket"
            time.sleep(0.1)


def test_openenv_http_named_episode(server, openenv_url):
    r = requests.post(f"{openenv_url}/reset", json={"seed": 1, "episode_id": "ep-http"}, timeout=30)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["done"] is False and first["observation"]["status"]["step"] == 0
    for k, action in enumerate([{"type": "write_file", "path": "a.cu", "content": "// a\n"},
                                {"type": "edit", "path": "a.cu", "old": "// a", "new": "// b"}]):
        r = requests.post(f"{openenv_url}/step", json={"action": dict(action, episode_id="ep-http")}, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["observation"]["status"]["step"] == k + 1  # the same d2k episode across requests
    assert body["observation"]["files"]["a.cu"] == "// b\n"
    r = requests.post(f"{openenv_url}/step", json={"action": {"type": "close", "episode_id": "ep-http"}}, timeout=30)
    assert r.status_code == 200 and r.json()["done"] is True
    schema = requests.get(f"{openenv_url}/schema", timeout=10).json()
    assert "type" in schema["action"]["properties"]

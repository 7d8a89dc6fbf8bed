"""Starts a real ``d2k serve`` for the tests.

Binary: $D2K_BIN, default <repo>/build/bin/d2k. Tasks: <repo>/tasks (or $D2K_TASKS_DIR). More
``d2k serve`` options: $D2K_SERVE_ARGS (split at spaces; e.g. ``--no-prepare`` on a GPU machine).
Without the binary the server tests are skipped, unless D2K_REQUIRE_SERVER=1 (CI), where they
fail instead.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))  # run from the source tree without installing
sys.path.insert(0, str(REPO))             # agents/ lives at the repo root

import d2k  # noqa: E402

SERVER_START_S = 60.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_binary() -> Path:
    return Path(os.environ.get("D2K_BIN", REPO / "build" / "bin" / "d2k"))


def tasks_dir() -> Path:
    return Path(os.environ.get("D2K_TASKS_DIR", REPO / "tasks"))


class Server:
    def __init__(self, binary: Path, workdir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        env = dict(os.environ, XDG_CACHE_HOME=str(workdir / "cache"))
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--endpoint", self.endpoint, "--tasks", str(tasks_dir()),
             *os.environ.get("D2K_SERVE_ARGS", "").split()],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.hello = self._wait_ready()

    def _wait_ready(self) -> dict:
        deadline = time.monotonic() + SERVER_START_S
        with d2k.Client(self.endpoint, timeout=0.5) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"d2k serve exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    return client.hello("pytest")
                except d2k.ClientTimeout:
                    continue  # not bound yet; hello is resent under a fresh id
        self.stop()
        raise RuntimeError(f"d2k serve did not answer hello in {SERVER_START_S} s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        self.log.flush()
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    @property
    def has_gpu(self) -> bool:
        return bool(self.hello.get("gpus"))

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    binary = server_binary()
    if not binary.is_file():
        message = f"d2k server binary not found at {binary} (set D2K_BIN)"
        if os.environ.get("D2K_REQUIRE_SERVER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    srv = Server(binary, tmp_path_factory.mktemp("d2k-server"))
    yield srv
    code = srv.stop()
    assert code == 0, f"d2k serve exited with {code} after SIGTERM:\n{srv.tail()}"


@pytest.fixture(scope="session")
def task_id(server) -> str:
    """The tiny task every test uses: vector_add when present, else the first listed."""
    with d2k.Client(server.endpoint) as client:
        tasks = [t["id"] for t in client.list_tasks()]
    assert tasks, "the server lists no tasks"
    return "vector_add" if "vector_add" in tasks else tasks[0]


@pytest.fixture()
def client(server):
    with d2k.Client(server.endpoint) as c:
        yield c


TEST_DEADLINE_S = int(os.environ.get("D2K_TEST_DEADLINE_S", "60"))


@pytest.fixture(autouse=True)
def _deadline():
    """A hang guard: a test still running after TEST_DEADLINE_S fails instead of blocking CI
    (tests are written to finish well under 30 s; nvcc on a loaded 2-core box is the slack)."""
    def expire(signum, frame):
        raise TimeoutError(f"test exceeded {TEST_DEADLINE_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)

"""Options and fixtures of the conformance suite (see README.md).

    python -m pytest tests/conformance --endpoint tcp://127.0.0.1:5555

Every test talks to the server only through wireclient.Conn, so it runs against any server that
claims to speak protocol v1.
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Iterator

import pytest

from wireclient import Conn, Reply, ok


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("d2k conformance")
    group.addoption("--endpoint", default=os.environ.get("D2K_ENDPOINT"),
                    help="the server under test (tcp://HOST:PORT or ipc://PATH); default $D2K_ENDPOINT")
    group.addoption("--task", default=None,
                    help="the task episodes are opened on (default: vector_add if listed, else the first task)")
    group.addoption("--request-timeout", type=float, default=300.0,
                    help="seconds to wait for one reply (compiles and evaluations take a while)")
    group.addoption("--max-fill-sessions", type=int, default=256,
                    help="the capacity test opens sessions up to max_sessions only when it is at most this")
    group.addoption("--timers-endpoint", default=None,
                    help="a second server whose timers are short (idle_timeout_s, compile_deadline_s, each "
                         "<= --max-wait): for idle reaping and a compile past its deadline")
    group.addoption("--stop-endpoint", default=None,
                    help="a server on this machine the suite may stop with SIGTERM (with --stop-pid): "
                         "for shutting_down; it runs last")
    group.addoption("--stop-pid", type=int, default=None, help="the process id of --stop-endpoint's server")
    group.addoption("--max-wait", type=float, default=15.0,
                    help="tests that must wait out a server timer (idle reaping, a compile deadline) run only "
                         "when that timer is at most this many seconds")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a server whose hello lists GPUs")
    config.addinivalue_line("markers", "stops_server: stops the --stop-endpoint server; runs last")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Stopping a server must come after every other test that might use it.
    items.sort(key=lambda item: item.get_closest_marker("stops_server") is not None)


@pytest.fixture(scope="session")
def endpoint(pytestconfig: pytest.Config) -> str:
    value = pytestconfig.getoption("--endpoint")
    if not value:
        pytest.exit("give the server under test: --endpoint tcp://HOST:PORT (or set D2K_ENDPOINT)", returncode=4)
    return value


@pytest.fixture(scope="session")
def request_timeout(pytestconfig: pytest.Config) -> float:
    return float(pytestconfig.getoption("--request-timeout"))


@pytest.fixture
def conn(endpoint: str, request_timeout: float) -> Iterator[Conn]:
    with Conn(endpoint, timeout=request_timeout) as c:
        yield c


@pytest.fixture
def connect(endpoint: str, request_timeout: float) -> Iterator[Callable[..., Conn]]:
    """Opens more sockets to the server (closed at the end of the test)."""
    opened: list[Conn] = []

    def make(**kwargs: Any) -> Conn:
        c = Conn(kwargs.pop("endpoint", endpoint), timeout=request_timeout, **kwargs)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


@pytest.fixture(scope="session")
def hello(endpoint: str, request_timeout: float) -> dict[str, Any]:
    with Conn(endpoint, timeout=min(request_timeout, 30.0)) as c:
        return ok(c.call("hello", client="d2k-conformance"))


@pytest.fixture(scope="session")
def limits(hello: dict[str, Any]) -> dict[str, Any]:
    return hello["limits"]


@pytest.fixture(scope="session")
def has_gpu(hello: dict[str, Any]) -> bool:
    return bool(hello["gpus"])


@pytest.fixture(scope="session")
def tasks(endpoint: str, request_timeout: float) -> list[dict[str, Any]]:
    with Conn(endpoint, timeout=min(request_timeout, 30.0)) as c:
        return ok(c.call("list_tasks"))["tasks"]


@pytest.fixture(scope="session")
def task_id(pytestconfig: pytest.Config, tasks: list[dict[str, Any]]) -> str:
    wanted = pytestconfig.getoption("--task")
    ids = [t["id"] for t in tasks]
    if wanted:
        assert wanted in ids, f"--task {wanted} is not in list_tasks: {ids}"
        return wanted
    assert ids, "list_tasks lists no task: nothing to open an episode on"
    return "vector_add" if "vector_add" in ids else ids[0]


def config_number(hello: dict[str, Any], *path: str, default: float) -> float:
    """A number from hello.config (informative, section 7.1), or the spec's default."""
    node: Any = hello.get("config", {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else default


@pytest.fixture(scope="session")
def failure_reward(hello: dict[str, Any]) -> float:
    """Section 11: the reward of a failed write_file/edit/patch (default -0.1)."""
    return float(config_number(hello, "step_reward", "invalid_action", default=-0.1))


@pytest.fixture(scope="session")
def compile_error_reward(hello: dict[str, Any]) -> float:
    """Section 11: the reward of a failed compile (default -0.1)."""
    return float(config_number(hello, "reward", "compile_error", default=-0.1))


class Episode:
    """One session opened by reset, driven over one Conn."""

    def __init__(self, conn: Conn, reply: Reply) -> None:
        self.conn = conn
        self.reset_reply = reply
        body = ok(reply)
        self.id: str = body["session"]
        self.observation: dict[str, Any] = body["observation"]
        self.main_file: str = self.observation["task"]["main_file"]

    def send_step(self, action: dict[str, Any], **kwargs: Any) -> int:
        return self.conn.send("step", session=self.id, action=action, **kwargs)

    def step(self, action: dict[str, Any], **kwargs: Any) -> Reply:
        return self.conn.wait(self.send_step(action, **kwargs))

    def ok_step(self, action: dict[str, Any]) -> dict[str, Any]:
        body = ok(self.step(action))
        self.observation = body["observation"]
        return body

    def observe(self) -> dict[str, Any]:
        body = ok(self.conn.call("observe", session=self.id))
        self.observation = body["observation"]
        return body

    def close(self) -> Reply:
        return self.conn.call("close", session=self.id)


@pytest.fixture
def open_episode(conn: Conn, task_id: str) -> Iterator[Callable[..., Episode]]:
    """reset(task, layer, **fields) on `conn` (or another Conn); every session is closed afterwards."""
    opened: list[Episode] = []

    def make(*, layer: int = 0, on: Conn | None = None, task: str | None = None, **fields: Any) -> Episode:
        c = on or conn
        episode = Episode(c, c.call("reset", task=task or task_id, layer=layer, **fields))
        opened.append(episode)
        return episode

    yield make
    for episode in opened:
        try:
            episode.close()  # unknown_session when the test closed it already: fine
        except Exception:
            pass


def unique_comment() -> str:
    """A comment that makes a source unique, so a compile is never a compile-cache hit."""
    return f"\n// d2k-conformance {uuid.uuid4().hex}\n"

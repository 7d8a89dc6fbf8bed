"""Errors that depend on the server's configured limits and life: `capacity` (section 4, 7.3),
a compile past its deadline (section 8), `shutting_down` (section 4). The last two need a second
server with short timers (--timers-endpoint) or one the suite may stop (--stop-endpoint)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import Episode
from wireclient import Conn, err, ok

# An include bomb: 2^40 nested includes of itself, in constant memory; it never finishes compiling.
INCLUDE_BOMB = "#if __INCLUDE_LEVEL__ < 40\n#include __FILE__\n#include __FILE__\n#endif\n"


def test_capacity(conn: Conn, hello, task_id: str, pytestconfig) -> None:
    """§4 capacity (retryable), §7.3: a reset beyond max_sessions is refused; closing one makes room."""
    max_sessions = int(hello["config"]["max_sessions"])
    if max_sessions > pytestconfig.getoption("--max-fill-sessions"):
        pytest.skip(f"max_sessions is {max_sessions}, more than --max-fill-sessions")
    ids = [conn.send("reset", task=task_id, layer=0) for _ in range(max_sessions + 1)]
    replies = [conn.wait(i) for i in ids]
    opened = [r["session"] for r in replies if r.ok]
    refused = [r for r in replies if not r.ok]
    try:
        assert refused, f"{len(opened)} resets beyond max_sessions {max_sessions} were all accepted"
        for r in refused:
            err(r, "capacity")
        assert len(opened) <= max_sessions
        ok(conn.call("close", session=opened.pop()))
        retry = ok(conn.call("reset", task=task_id, layer=0))  # §6: after a retryable error, a fresh id
        opened.append(retry["session"])
    finally:
        for session in opened:
            conn.call("close", session=session)


def timers_server(pytestconfig, key: str, extra: float) -> str:
    endpoint = pytestconfig.getoption("--timers-endpoint")
    if not endpoint:
        pytest.skip("give --timers-endpoint: a server with short timers (compile_deadline_s)")
    with Conn(endpoint, timeout=30) as c:
        value = ok(c.call("hello"))["config"].get(key)
    if not isinstance(value, (int, float)) or value + extra > pytestconfig.getoption("--max-wait"):
        pytest.skip(f"{key} of --timers-endpoint is {value!r}: waiting it out takes more than --max-wait")
    return endpoint


def compile_bomb(pytestconfig, request_timeout: float, task_id: str) -> dict:
    endpoint = timers_server(pytestconfig, "compile_deadline_s", 5.0)
    with Conn(endpoint, timeout=request_timeout) as c:
        ep = Episode(c, c.call("reset", task=task_id, layer=0))
        try:
            ep.ok_step({"type": "write_file", "path": ep.main_file, "content": INCLUDE_BOMB})
            return ep.ok_step({"type": "compile"})
        finally:
            ep.close()


def test_compile_past_its_deadline_fails_the_step(pytestconfig, request_timeout: float, task_id: str) -> None:
    """§8, §9: a compile past its deadline is a failed step: last.ok false, compile.timed_out true."""
    body = compile_bomb(pytestconfig, request_timeout, task_id)
    last = body["observation"]["last"]
    assert last["ok"] is False and last["compile"]["ok"] is False
    assert last["compile"]["timed_out"] is True
    assert body["observation"]["step"] == 2 and body["reward"] < 0


def test_compile_past_its_deadline_is_timeout(pytestconfig, request_timeout: float, task_id: str) -> None:
    """§8: "compile: the compile ran past its deadline → timeout (last.compile.timed_out is true)"."""
    last = compile_bomb(pytestconfig, request_timeout, task_id)["observation"]["last"]
    assert last["error"]["code"] == "timeout", last["error"]


def process_gone(pid: int) -> bool:
    """Exited (a zombie waiting for its parent counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # ESRCH: it vanished while being read
        return True
    return state in ("Z", "X")


@pytest.mark.stops_server
def test_shutting_down(pytestconfig, request_timeout: float, task_id: str) -> None:
    """§4 shutting_down (retryable): once the server is stopping it takes no new work; it exits
    within its shutdown grace."""
    endpoint, pid = pytestconfig.getoption("--stop-endpoint"), pytestconfig.getoption("--stop-pid")
    if not endpoint or not pid:
        pytest.skip("give --stop-endpoint and --stop-pid: a local server the suite may stop")
    with Conn(endpoint, timeout=request_timeout) as c:
        grace = float(ok(c.call("hello"))["config"].get("shutdown_grace_s", 30.0))
        ep = Episode(c, c.call("reset", task=task_id, layer=0))
        ep.ok_step({"type": "write_file", "path": ep.main_file, "content": INCLUDE_BOMB})
        ep.send_step({"type": "compile"})  # work in flight keeps the server in its grace period
        ok(c.call("observe", session=ep.id))  # the compile was received before this reply
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        reply = c.call("hello", timeout=10)
        while reply.ok and time.monotonic() < deadline:  # the signal reaches the server asynchronously
            time.sleep(0.05)
            reply = c.call("hello", timeout=10)
        err(reply, "shutting_down")
        err(c.call("reset", task=task_id, layer=0, timeout=10), "shutting_down")
        err(c.call("observe", session=ep.id, timeout=10), "shutting_down")
    until = time.monotonic() + grace + 60
    while not process_gone(pid) and time.monotonic() < until:
        time.sleep(0.2)
    assert process_gone(pid), f"the server did not exit within its shutdown grace ({grace} s) and a minute"

"""PROTOCOL.md section 10 (episode states and end reasons): open → ended → gone."""
from __future__ import annotations

import time

import pytest

from wireclient import Conn, err, ok

WRITE = {"type": "write_file", "path": "s.cuh", "content": "// s\n"}


def test_step_budget_truncates_on_the_last_step(open_episode, task_id: str) -> None:
    """§10: the step that uses the last of max_steps ends the episode: truncated, "step_budget"."""
    ep = open_episode(options={"max_steps": 2})
    body = ep.ok_step(WRITE)
    assert body["terminated"] is False and body["truncated"] is False
    assert body["observation"]["done"] is False and body["info"]["end_reason"] is None
    body = ep.ok_step(WRITE)
    assert body["terminated"] is False and body["truncated"] is True
    assert body["observation"]["done"] is True
    assert body["observation"]["end_reason"] == "step_budget"
    assert body["info"]["end_reason"] == "step_budget" and body["info"]["task"] == task_id
    assert body["observation"]["last"]["ok"] is True, "the last step's action still ran"


def test_a_failed_action_on_the_last_step_also_ends_it(open_episode) -> None:
    """§7.4, §10: every action that is run consumes a step, failed or not."""
    ep = open_episode(options={"max_steps": 1})
    body = ep.ok_step({"type": "edit", "path": "none.cuh", "old": "a", "new": "b"})
    assert body["observation"]["last"]["ok"] is False
    assert body["truncated"] is True and body["observation"]["end_reason"] == "step_budget"


def test_ended_episode_refuses_steps_but_observes_and_closes(open_episode, conn: Conn) -> None:
    """§10: in the ended state step gives episode_ended (no effect); observe and close work, and
    close keeps the earlier end reason; then the session is gone."""
    ep = open_episode(options={"max_steps": 1})
    ep.ok_step(WRITE)
    for action in (WRITE, {"type": "compile"}, {"type": "evaluate"}, {"type": "submit"}):
        err(ep.step(action), "episode_ended")
    body = ep.observe()
    assert body["observation"]["done"] is True and body["observation"]["step"] == 1
    assert body["observation"]["end_reason"] == "step_budget"
    assert body["info"]["end_reason"] == "step_budget"
    closed = ok(ep.close())
    assert closed["end_reason"] == "step_budget" and closed["steps"] == 1
    err(conn.call("observe", session=ep.id), "unknown_session")
    err(conn.call("step", session=ep.id, action=WRITE), "unknown_session")


def test_wall_time_truncates_without_running_the_action(open_episode) -> None:
    """§7.4, §10: the first step after wall_seconds ran out does not run its action: truncated,
    reward 0.0, end_reason "wall_time"."""
    ep = open_episode(options={"wall_seconds": 0.2})
    files = dict(ep.observation["files"])
    time.sleep(0.4)  # the budget itself is time: it must run out
    body = ep.ok_step(WRITE)
    assert body["truncated"] is True and body["terminated"] is False
    assert body["reward"] == 0.0 and isinstance(body["reward"], float)
    assert body["observation"]["end_reason"] == "wall_time" and body["info"]["end_reason"] == "wall_time"
    assert body["observation"]["done"] is True
    assert body["observation"]["files"] == files, "the action must not run after the wall time"
    err(ep.step(WRITE), "episode_ended")
    assert ok(ep.close())["end_reason"] == "wall_time"


def test_close_of_an_open_episode(open_episode) -> None:
    """§10: close from open → end_reason "closed"."""
    ep = open_episode()
    ep.ok_step(WRITE)
    body = ok(ep.close())
    assert body["end_reason"] == "closed" and body["steps"] == 1


def test_error_replies_have_no_effect(open_episode, conn: Conn) -> None:
    """§3: an error reply means the request had no effect: no step consumed, nothing changed."""
    ep = open_episode(options={"max_steps": 2})
    err(ep.step({"type": "dance"}), "invalid_action")
    err(ep.step({"type": "write_file", "path": "x.cuh"}), "invalid_action")
    err(conn.call("step", session=ep.id), "invalid_action")
    obs = ep.observe()["observation"]
    assert obs["step"] == 0 and obs["last"] is None and obs["done"] is False


def test_ended_episode_still_counts_in_stats(open_episode, conn: Conn) -> None:
    """§7.7: stats.sessions.ended counts open sessions whose episode ended."""
    ep = open_episode(options={"max_steps": 1})
    ep.ok_step(WRITE)
    stats = ok(conn.call("stats"))
    assert stats["sessions"]["ended"] >= 1


def test_idle_sessions_are_reaped(pytestconfig, request_timeout: float, task_id: str) -> None:
    """§10, §4: no request for a session for idle_timeout_s → it is gone (unknown_session), while a
    session that gets requests stays."""
    endpoint = pytestconfig.getoption("--timers-endpoint")
    if not endpoint:
        pytest.skip("give --timers-endpoint: a server with a short idle_timeout_s")
    slack = 3.0  # the server may reap a little after the timeout; the spec gives no figure
    with Conn(endpoint, timeout=request_timeout) as c:
        idle = float(ok(c.call("hello"))["config"]["idle_timeout_s"])
        if idle + slack > pytestconfig.getoption("--max-wait"):
            pytest.skip(f"idle_timeout_s is {idle} s: waiting it out takes more than --max-wait")
        idle_one = ok(c.call("reset", task=task_id, layer=0))["session"]
        busy_one = ok(c.call("reset", task=task_id, layer=0))["session"]
        until = time.monotonic() + idle + slack
        while time.monotonic() < until:  # waiting out the server's timer, keeping one session alive
            ok(c.call("observe", session=busy_one))
            time.sleep(min(0.25, idle / 4))
        err(c.call("observe", session=idle_one), "unknown_session")
        err(c.call("close", session=idle_one), "unknown_session")
        ok(c.call("observe", session=busy_one))
        ok(c.call("close", session=busy_one))

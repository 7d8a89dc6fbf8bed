"""PROTOCOL.md section 6 (retries and idempotency) and `busy` (section 4)."""
from __future__ import annotations

import secrets
import time

import pytest

from conftest import config_number, unique_comment
from wireclient import Conn, NoReply, err, ok


def unique_source(ep) -> str:
    """The starter plus a unique comment: its compile is never a cache hit, so it takes a while."""
    return ep.observation["files"][ep.main_file] + unique_comment()


def test_retried_step_gets_the_cached_reply_and_runs_once(open_episode) -> None:
    """§6: a retry (same id) of a completed step gets the same bytes; no second step is consumed."""
    ep = open_episode()
    request_id = ep.conn.fresh_id()
    action = {"type": "write_file", "path": "r.cuh", "content": "// r\n"}
    first = ep.step(action, id=request_id)
    ok(first)
    second = ep.step(action, id=request_id)
    assert second.raw == first.raw, "a retried step must get the byte-identical cached reply"
    assert ep.observe()["observation"]["step"] == 1


def test_id_reused_for_a_different_step_gets_the_old_reply(open_episode) -> None:
    """§6: an id reused for a different request gets the old reply, and the new action is not run."""
    ep = open_episode()
    request_id = ep.conn.fresh_id()
    first = ep.step({"type": "write_file", "path": "one.cuh", "content": "1"}, id=request_id)
    second = ep.step({"type": "write_file", "path": "two.cuh", "content": "2"}, id=request_id)
    assert second.raw == first.raw
    obs = ep.observe()["observation"]
    assert "two.cuh" not in obs["files"] and obs["step"] == 1


def test_retry_of_a_step_in_flight_is_answered_once_it_completes(open_episode) -> None:
    """§6: a retry of a request still in flight is not run again; every copy gets the reply."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": unique_source(ep)})
    request_id = ep.conn.fresh_id()
    ep.send_step({"type": "compile"}, id=request_id)
    ep.send_step({"type": "compile"}, id=request_id)  # while the first compile runs
    first = ep.conn.wait(request_id)
    second = ep.conn.wait(request_id)
    ok(first)
    assert second.raw == first.raw
    obs = ep.observe()["observation"]
    assert obs["step"] == 2 and obs["budget"]["compiles_used"] == 1


def test_busy_while_an_action_is_in_flight(open_episode) -> None:
    """§4 busy (retryable): a second step (fresh id) before the first one's reply; it had no effect,
    and the same request with a fresh id succeeds afterwards."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": unique_source(ep)})
    compile_id = ep.send_step({"type": "compile"})
    action = {"type": "write_file", "path": "late.cuh", "content": "// late\n"}
    busy_id = ep.send_step(action)
    busy = ep.conn.wait(busy_id)
    err(busy, "busy", id=busy_id)
    ok(ep.conn.wait(compile_id))
    obs = ep.observe()["observation"]
    assert "late.cuh" not in obs["files"] and obs["step"] == 2, "a busy reply had an effect"
    assert ok(ep.step(action))["observation"]["files"]["late.cuh"] == "// late\n"


def test_observe_is_not_cached(open_episode) -> None:
    """§6: hello, list_tasks, observe and stats change nothing: a retry runs again (current state)."""
    ep = open_episode()
    request_id = ep.conn.fresh_id()
    before = ok(ep.conn.wait(ep.conn.send("observe", id=request_id, session=ep.id)))
    ep.ok_step({"type": "write_file", "path": "o.cuh", "content": "o"})
    after = ok(ep.conn.wait(ep.conn.send("observe", id=request_id, session=ep.id)))
    assert before["observation"]["step"] == 0 and after["observation"]["step"] == 1


def test_stats_is_not_cached(conn: Conn) -> None:
    """§6: a stats retry runs again: requests grows."""
    request_id = conn.fresh_id()
    first = ok(conn.wait(conn.send("stats", id=request_id)))
    conn.call("hello")
    second = ok(conn.wait(conn.send("stats", id=request_id)))
    assert second["requests"] > first["requests"]


def test_retried_reset_opens_one_session(conn: Conn, task_id: str) -> None:
    """§6: a retried reset (same client, same id) gets the same reply and opens no second session."""
    request_id = conn.fresh_id()
    first = conn.wait(conn.send("reset", id=request_id, task=task_id, layer=0))
    second = conn.wait(conn.send("reset", id=request_id, task=task_id, layer=0))
    session = ok(first)["session"]
    try:
        assert second.raw == first.raw
    finally:
        conn.call("close", session=session)


def test_reset_id_is_per_routing_identity(connect, task_id: str) -> None:
    """§6: reset is keyed by (client routing identity, id): another client's same id is a new request."""
    a, b = connect(), connect()
    request_id = a.fresh_id()
    first = ok(a.wait(a.send("reset", id=request_id, task=task_id, layer=0)))
    second = ok(b.wait(b.send("reset", id=request_id, task=task_id, layer=0)))
    try:
        assert first["session"] != second["session"]
    finally:
        a.call("close", session=first["session"])
        b.call("close", session=second["session"])


def resend_until_answered(c: Conn, request_id: int, fields: dict, seconds: float = 15.0):
    """§6: a DEALER resends the same request (same id) until a reply comes; None if none came."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        c.send("reset", id=request_id, **fields)
        try:
            return c.wait(request_id, timeout=0.5)
        except NoReply:
            continue
    return None


def test_reset_retry_across_a_reconnect_with_the_same_routing_id(connect, task_id: str) -> None:
    """§6: with ZMQ_ROUTING_ID kept across reconnects, a retried reset (resent until answered) gets
    the cached reply: no second session."""
    routing_id = b"d2k-conf-" + secrets.token_hex(8).encode()
    fields = {"task": task_id, "layer": 0}
    a = connect(routing_id=routing_id)
    request_id = a.fresh_id()
    first = a.wait(a.send("reset", id=request_id, **fields))
    session = ok(first)["session"]
    a.close()
    b = connect(routing_id=routing_id)
    try:
        second = resend_until_answered(b, request_id, fields)
        assert second is not None, "no reply to the retried reset after reconnecting"
        assert second.raw == first.raw
    finally:
        ok(connect().call("close", session=session))


def test_reset_retry_from_a_new_socket_while_the_old_one_is_connected(connect, task_id: str) -> None:
    """§6: the retry reaches the server although the old socket's connection is still up."""
    routing_id = b"d2k-conf-" + secrets.token_hex(8).encode()
    fields = {"task": task_id, "layer": 0}
    a = connect(routing_id=routing_id)
    request_id = a.fresh_id()
    first = a.wait(a.send("reset", id=request_id, **fields))
    session = ok(first)["session"]
    b = connect(routing_id=routing_id)  # `a` stays connected, as after a client-side timeout
    try:
        second = resend_until_answered(b, request_id, fields, seconds=5.0)
        assert second is not None, "the retry from the new socket got no reply"
        assert second.raw == first.raw
    finally:
        a.close()
        ok(connect().call("close", session=session))


def test_retried_close_gets_the_same_reply(open_episode) -> None:
    """§6, §7.6: a retry of a close (same id) gets the same reply although the session is gone."""
    ep = open_episode()
    request_id = ep.conn.fresh_id()
    first = ep.conn.wait(ep.conn.send("close", id=request_id, session=ep.id))
    ok(first)
    second = ep.conn.wait(ep.conn.send("close", id=request_id, session=ep.id))
    assert second.raw == first.raw
    err(ep.conn.call("close", session=ep.id), "unknown_session")


def test_step_replies_older_than_the_cache_run_again(open_episode, hello) -> None:
    """§6: the server keeps the last 16 step replies per session; an older retry is a new request."""
    keep = int(config_number(hello, "reply_cache_per_session", default=16))
    ep = open_episode(options={"max_steps": keep + 5})
    if ep.observation["budget"]["max_steps"] < keep + 3:
        pytest.skip("the server's max steps are too few")
    first_id = ep.conn.fresh_id()
    action = {"type": "write_file", "path": "old.cuh", "content": "// old\n"}
    first = ok(ep.step(action, id=first_id))
    for i in range(keep):
        ok(ep.step({"type": "write_file", "path": f"n{i % 3}.cuh", "content": str(i)}))
    again = ok(ep.step(action, id=first_id))
    assert first["observation"]["step"] == 1
    assert again["observation"]["step"] == keep + 2, "a retry older than the cache must run as a new request"


def test_step_replies_within_the_cache_are_kept(open_episode, hello) -> None:
    """§6: a retry of the oldest of the last 16 step replies is still answered from the cache."""
    keep = int(config_number(hello, "reply_cache_per_session", default=16))
    ep = open_episode(options={"max_steps": keep + 5})
    if ep.observation["budget"]["max_steps"] < keep + 2:
        pytest.skip("the server's max steps are too few")
    first_id = ep.conn.fresh_id()
    action = {"type": "write_file", "path": "old.cuh", "content": "// old\n"}
    first = ep.step(action, id=first_id)
    for i in range(keep - 1):
        ok(ep.step({"type": "write_file", "path": "n.cuh", "content": str(i)}))
    assert ep.step(action, id=first_id).raw == first.raw
    assert ep.observe()["observation"]["step"] == keep


def test_observe_while_an_action_is_in_flight(open_episode) -> None:
    """§4 busy is for a second *action*; §7.5 observe (errors: bad_request, unknown_session only) answers
    while a step is in flight, showing the state before that step."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": unique_source(ep)})
    compile_id = ep.send_step({"type": "compile"})
    during = ep.observe()["observation"]
    assert during["step"] == 1 and during["last"]["action"] == "write_file"
    assert ok(ep.conn.wait(compile_id))["observation"]["step"] == 2

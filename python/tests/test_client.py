"""The synchronous client against a real `d2k serve`."""
from __future__ import annotations

import uuid

import msgpack
import pytest
import zmq

import d2k


def test_hello_reports_protocol_and_limits(client):
    hello = client.hello()
    assert hello["server"] == "d2k-gym"
    assert 1 in hello["protocol"]
    assert isinstance(hello["gpus"], list)
    assert hello["limits"]["max_file_bytes"] > 0


def test_list_tasks_has_layers(client, task_id):
    tasks = {t["id"]: t for t in client.list_tasks()}
    assert task_id in tasks
    assert list(tasks[task_id]["layers"]) == [0, 1, 2, 3]


def test_session_write_compile_close(client, task_id):
    with client.reset(task_id, layer=1, seed=3, label="pytest") as s:
        obs = s.observation
        assert obs["layer"] == 1 and obs["step"] == 0 and obs["last"] is None
        assert obs["task"]["id"] == task_id
        assert [g["layer"] for g in obs["guidance"]] == [1]
        main = obs["task"]["main_file"]
        assert main in obs["files"]
        r = s.write_file("notes.h", "// notes\n")
        assert r.ok and r.reward == 0.0 and not r.done
        assert r.observation["files"]["notes.h"] == "// notes\n"
        assert r.info["end_reason"] is None and r.info["task"] == task_id
        r = s.edit("notes.h", "notes", "more notes")
        assert r.ok and r.observation["files"]["notes.h"] == "// more notes\n"
        r = s.compile()
        assert r.last["action"] == "compile" and "compile" in r.last
        assert r.observation["step"] == 3
    assert s.closed and s.end_reason == "closed"
    with pytest.raises(d2k.UnknownSession):
        client.observe(s.id)


def test_outcome_failures_are_observations_not_exceptions(client, task_id):
    with client.reset(task_id) as s:
        r = s.write_file("../escape.cu", "x")
        assert not r.ok and isinstance(r.error, d2k.PathViolation)
        assert r.reward < 0 and r.observation["step"] == 1
        r = s.edit(s.observation["task"]["main_file"], "this text is not in the file", "y")
        assert not r.ok and isinstance(r.error, d2k.InvalidAction)
        main = s.observation["task"]["main_file"]
        r = s.write_file(main, "this is not CUDA {{{\n")
        assert r.ok
        r = s.compile()
        assert not r.ok and r.reward < 0 and r.last["compile"]["ok"] is False
        assert r.last["compile"]["diagnostics"] or r.last["compile"]["log"]


def test_request_level_errors_are_typed(client, task_id):
    with pytest.raises(d2k.UnknownTask):
        client.reset("no_such_task_" + uuid.uuid4().hex[:6])
    with pytest.raises(d2k.BadRequest) as exc:
        client.reset(task_id, layer=7)
    assert exc.value.field == "layer"
    with pytest.raises(d2k.UnknownSession):
        client.step("no-such-session", {"type": "compile"})
    with pytest.raises(d2k.UnknownOp):
        client.request("frobnicate")
    with client.reset(task_id) as s:
        with pytest.raises(d2k.InvalidAction):
            s.step({"type": "frobnicate"})
        with pytest.raises(d2k.InvalidAction):
            s.step({"type": "write_file", "path": "a.cu"})  # content missing
        assert s.observe()["step"] == 0, "a refused request consumes no step"


def test_no_gpu_raises_NoGpu(server, client, task_id):
    if server.has_gpu:
        pytest.skip("the server has a GPU: no_gpu cannot happen")
    with client.reset(task_id) as s:
        for attempt in (s.evaluate, s.submit):
            with pytest.raises(d2k.NoGpu) as exc:
                attempt()
            assert not exc.value.retryable
        assert s.observe()["step"] == 0 and not s.done


def test_step_budget_truncates_then_episode_ended(client, task_id):
    with client.reset(task_id, max_steps=2) as s:
        r1 = s.write_file("a.h", "1")
        assert not r1.done
        r2 = s.write_file("a.h", "2")
        assert r2.truncated and not r2.terminated
        assert r2.info["end_reason"] == "step_budget" == r2.observation["end_reason"]
        with pytest.raises(d2k.EpisodeEnded):
            s.write_file("a.h", "3")
        assert s.observe()["done"] is True, "observe works after the end"
        s.close()
    assert s.end_reason == "step_budget" or s.end_reason == "closed"


def _raw(endpoint):
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 60000)
    sock.connect(endpoint)
    return sock


def test_retry_with_same_id_never_runs_twice(server, client, task_id):
    """A resent request id gets the cached reply, byte for byte, and runs once."""
    with client.reset(task_id) as s:
        sock = _raw(server.endpoint)
        try:
            marker = uuid.uuid4().hex  # fresh source: a real (uncached) compile is in flight
            request = {"v": 1, "id": 4242, "op": "step", "session": s.id,
                       "action": {"type": "write_file", "path": "m.h", "content": marker}}
            frame = msgpack.packb(request)
            sock.send(frame)
            first = sock.recv()
            sock.send(frame)
            second = sock.recv()
            assert first == second
            assert msgpack.unpackb(first)["observation"]["step"] == 1
            compile_req = msgpack.packb({"v": 1, "id": 4243, "op": "step", "session": s.id,
                                         "action": {"type": "compile"}})
            sock.send(compile_req)  # and again while the first copy is still in flight
            sock.send(compile_req)
            replies = [sock.recv(), sock.recv()]
            assert replies[0] == replies[1]
            assert msgpack.unpackb(replies[0])["observation"]["step"] == 2
        finally:
            sock.close()
        assert s.observe()["step"] == 2


def test_envelope_errors(server):
    sock = _raw(server.endpoint)
    try:
        sock.send(msgpack.packb({"v": 9, "id": 5, "op": "hello"}))
        reply = msgpack.unpackb(sock.recv())
        assert reply["id"] == 5 and reply["ok"] is False
        assert reply["error"]["code"] == "version_mismatch"
        sock.send(b"\xc1not msgpack")
        reply = msgpack.unpackb(sock.recv())
        assert reply["ok"] is False and reply["id"] is None
        assert reply["error"]["code"] == "bad_request" and reply["error"]["retryable"] is False
    finally:
        sock.close()


def test_busy_when_a_second_action_arrives_in_flight(server, task_id):
    policy = d2k.RetryPolicy(auto_retries=0)
    with d2k.Client(server.endpoint, policy=policy) as c, c.reset(task_id) as s:
        main = s.observation["task"]["main_file"]
        s.write_file(main, s.observation["files"][main] + f"\n// {uuid.uuid4().hex}\n")
        first, second = c.request_many([
            ("step", {"session": s.id, "action": {"type": "compile"}}),
            ("step", {"session": s.id, "action": {"type": "write_file", "path": "b.h",
                                                     "content": "x"}}),
        ])
        assert isinstance(first, dict) and first["observation"]["last"]["action"] == "compile"
        # A real nvcc run (seconds) keeps the session busy; a compile that failed at once would not.
        assert first["observation"]["last"]["ok"], first["observation"]["last"]
        assert isinstance(second, d2k.Busy) and second.retryable
    # With the default policy the busy step is retried under a fresh id and succeeds.
    with d2k.Client(server.endpoint) as c, c.reset(task_id) as s:
        main = s.observation["task"]["main_file"]
        s.write_file(main, s.observation["files"][main] + f"\n// {uuid.uuid4().hex}\n")
        first, second = c.request_many([
            ("step", {"session": s.id, "action": {"type": "compile"}}),
            ("step", {"session": s.id, "action": {"type": "write_file", "path": "b.h",
                                                     "content": "x"}}),
        ])
        assert isinstance(first, dict) and isinstance(second, dict)
        assert second["observation"]["step"] == 3


def test_stats(client):
    stats = client.stats()
    assert stats["sessions"]["total_opened"] >= 0
    assert "compile" in stats

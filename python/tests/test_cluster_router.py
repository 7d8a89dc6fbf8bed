"""The cluster router (d2k.cluster.Router) in front of real compile-only servers, without Ray.

Two or three `d2k serve` processes, one Router in this process: placement by load, sessions kept
on their server, same-id resends, a server killed (SIGKILL) mid-run ending exactly its sessions
with ServerLost while the others carry on, a server joining and one draining away.
"""
from __future__ import annotations

import os
import time

import pytest

from conftest import server_binary, tasks_dir

import d2k
from d2k.cluster import Router, ServerProcess


@pytest.fixture()
def servers(tmp_path):
    binary = server_binary()
    if not binary.is_file():
        if os.environ.get("D2K_REQUIRE_SERVER") == "1":
            pytest.fail(f"d2k server binary not found at {binary} (set D2K_BIN)")
        pytest.skip(f"d2k server binary not found at {binary} (set D2K_BIN)")
    started: list[ServerProcess] = []

    def start(n: int) -> list[ServerProcess]:
        out = []
        for _ in range(n):
            srv = ServerProcess("127.0.0.1", binary=str(binary), tasks_dir=str(tasks_dir()),
                                state_dir=str(tmp_path / f"s{len(started)}"),
                                extra_args=["--no-gpu", "--no-record", "--compile-workers", "1"])
            started.append(srv)
            out.append(srv)
        return out

    yield start
    for srv in started:
        srv.stop()


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_router_places_by_load_and_keeps_sessions(servers):
    a, b = servers(2)
    with Router("tcp://127.0.0.1:0", stats_interval_s=0.2, dead_after_s=None) as router:
        router.add_server("a", a.endpoint)
        router.add_server("b", b.endpoint)
        router.run_in_thread()
        with d2k.Client(router.endpoint) as client:
            hello = client.hello()
            assert hello["config"]["cluster"]["servers"] == 2
            assert hello["instance"] == router.instance
            sessions = [client.reset("vector_add", 0, seed=i) for i in range(10)]
            placed = {s.id: router.session_server(s.id) for s in sessions}
            counts = {name: list(placed.values()).count(name) for name in ("a", "b")}
            assert counts == {"a": 5, "b": 5}, counts  # an even spread by open sessions
            # Every request of a session goes to its server: steps count up there, one by one.
            for s in sessions:
                for k in range(3):
                    r = s.write_file("kernel.cu", f"// step {k}\n")
                    assert r.ok and r.observation["step"] == k + 1
            # stats: the router's own, with the servers' last polled figures summed up.
            stats = wait_for(lambda: (lambda st: st if st["sessions"]["active"] == 10 else None)(client.stats()),
                             10, "stats to show 10 active sessions")
            assert {srv["name"] for srv in stats["servers"]} == {"a", "b"}
            # A same-id resend reaches the same server and runs nothing twice.
            s = sessions[0]
            frame_fields = {"session": s.id, "action": {"type": "write_file", "path": "x.cu", "content": "1"}}
            first = client.request_many([("step", frame_fields)])[0]
            client._ids._next = client._ids._next - 1  # the next request reuses that id
            again = client.request_many([("step", frame_fields)])[0]
            assert first["observation"]["step"] == again["observation"]["step"] == 4, (first, again)
            for s in sessions:
                s.close()
            wait_for(lambda: router.status()["router"]["sessions"] == 0, 5, "the router to forget them")


def test_router_server_killed_mid_run(servers):
    a, b = servers(2)
    with Router("tcp://127.0.0.1:0", stats_interval_s=0.2, dead_after_s=3.0) as router:
        router.add_server("a", a.endpoint)
        router.add_server("b", b.endpoint)
        router.run_in_thread()
        with d2k.Client(router.endpoint) as client:
            sessions = [client.reset("vector_add", 0, seed=i) for i in range(8)]
            owner = {s.id: router.session_server(s.id) for s in sessions}
            a.kill()  # a crash: no goodbye, the router notices the silence
            wait_for(lambda: router.status()["servers"][0]["state"] == "lost", 20, "server a lost")
            for s in sessions:
                if owner[s.id] == "a":
                    with pytest.raises(d2k.ServerLost) as err:
                        s.write_file("kernel.cu", "// after the crash\n")
                    assert "server a" in str(err.value) and not err.value.retryable
                    s.close()  # a lost session closes quietly (ServerLost is an UnknownSession)
                else:
                    assert s.write_file("kernel.cu", "// carries on\n").observation["step"] == 1
                    s.close()
            # New sessions go to the live server.
            fresh = [client.reset("vector_add", 0) for _ in range(3)]
            assert {router.session_server(s.id) for s in fresh} == {"b"}
            for s in fresh:
                s.close()


def test_router_join_and_drain(servers):
    (a,) = servers(1)
    with Router("tcp://127.0.0.1:0", stats_interval_s=0.2, dead_after_s=None) as router:
        router.run_in_thread()
        with d2k.Client(router.endpoint, policy=d2k.RetryPolicy(auto_retries=0)) as client:
            with pytest.raises(d2k.Capacity):  # no server yet: refused, typed and retryable
                client.request("reset", task="vector_add", layer=0)
            router.add_server("a", a.endpoint)
            s1 = client.reset("vector_add", 0)
            (b,) = servers(1)
            router.add_server("b", b.endpoint)  # joins while the cluster runs
            s2 = client.reset("vector_add", 0)
            assert router.session_server(s2.id) == "b"
            router.remove_server("a", drain=True)  # leaves once its session is closed
            assert s1.write_file("k.cu", "// still served while draining\n").ok
            s3 = client.reset("vector_add", 0)
            assert router.session_server(s3.id) == "b"
            s1.close()
            wait_for(lambda: [x["name"] for x in router.status()["servers"]] == ["b"], 10, "a to leave")
            s2.close()
            s3.close()


def test_cluster_addresses():
    from d2k.cluster.address import is_cluster_address, resolve_endpoint, split_address

    assert resolve_endpoint("tcp://127.0.0.1:5600") == "tcp://127.0.0.1:5600"  # unchanged
    assert resolve_endpoint(None) is None
    assert not is_cluster_address("ipc:///tmp/x") and is_cluster_address("ray:auto")
    assert split_address("ray:auto") == ("auto", "d2k")
    assert split_address("ray:10.0.0.1:6379#prod") == ("10.0.0.1:6379", "prod")
    assert split_address("ray://head:10001") == ("ray://head:10001", "d2k")


def test_router_replaces_a_reset_in_flight_to_a_dying_server(servers):
    import signal as sig

    a, b = servers(2)
    with Router("tcp://127.0.0.1:0", stats_interval_s=0.2, dead_after_s=2.0) as router:
        router.add_server("a", a.endpoint, a.hello)
        router.run_in_thread()
        a.proc.send_signal(sig.SIGSTOP)  # hung: the reset below reaches it and gets no answer
        try:
            with d2k.Client(router.endpoint) as client:
                router.add_server("b", b.endpoint, b.hello)
                router.remove_server("b", drain=True)  # b takes nothing new yet...
                import threading
                timer = threading.Timer(0.5, lambda: router.add_server("b", b.endpoint, b.hello))
                timer.start()                          # ...until after the reset went to a
                s = client.reset("vector_add", 0)      # a goes silent -> lost -> the reset goes to b
                timer.join()
                assert router.session_server(s.id) == "b"
                assert s.write_file("k.cu", "// on b\n").observation["step"] == 1
                wait_for(lambda: {x["name"]: x["state"] for x in router.status()["servers"]}["a"] == "lost",
                         10, "a to show as lost")
                s.close()
        finally:
            a.proc.send_signal(sig.SIGCONT)


def test_router_real_evaluation_on_gpu(servers):
    """On a GPU machine: a real evaluation (the task's baseline) through the router."""
    binary = server_binary()
    if not binary.is_file():
        pytest.skip("no server binary")
    srv = ServerProcess("127.0.0.1", binary=str(binary), tasks_dir=str(tasks_dir()),
                        extra_args=["--no-record"])
    try:
        if not srv.hello.get("gpus"):
            pytest.skip("no GPU here: the lead runs this on the H200")
        with Router("tcp://127.0.0.1:0", stats_interval_s=0.5, dead_after_s=None) as router:
            router.add_server("gpu", srv.endpoint, srv.hello)
            router.run_in_thread()
            baseline = (tasks_dir() / "vector_add" / "baseline.cu").read_text()
            with d2k.Client(router.endpoint) as client:
                assert client.hello()["gpus"][0]["server"] == "gpu"
                with client.reset("vector_add", 0) as s:
                    assert s.write_file("kernel.cu", baseline).ok
                    r = s.evaluate()
                    assert r.ok, r.last
                    evaluation = r.last["evaluation"]
                    assert evaluation["status"] == "ok", evaluation
                    assert all(w["correct"] for w in evaluation["workloads"]), evaluation
                    assert isinstance(r.info.get("reward"), dict)  # the breakdown, as from a server
    finally:
        srv.stop()


def test_router_refuses_bad_frames_and_carries_on(servers):
    import msgpack
    import zmq

    (a,) = servers(1)
    with Router("tcp://127.0.0.1:0", dead_after_s=None) as router:
        router.add_server("a", a.endpoint, a.hello)
        router.run_in_thread()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(router.endpoint)
        try:
            bad = [b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"v": 1, "id": True, "op": "hello"}),
                   msgpack.packb({"v": 2, "id": 5, "op": "hello"}), msgpack.packb({"v": 1, "id": 6, "op": 7}),
                   msgpack.packb({"v": 1, "id": 8, "op": "step", "session": "f" * 32, "action": {}}),
                   msgpack.packb({"v": 1, "id": 9, "op": "frobnicate"})]
            codes = []
            for frame in bad:
                sock.send(frame)
                reply = msgpack.unpackb(sock.recv(), raw=False)
                assert reply["ok"] is False
                codes.append(reply["error"]["code"])
            assert codes == ["bad_request", "bad_request", "bad_request", "version_mismatch", "bad_request",
                             "unknown_session", "unknown_op"], codes
        finally:
            sock.close(linger=0)
            ctx.term()
        with d2k.Client(router.endpoint) as client:  # still serving
            with client.reset("vector_add", 0) as s:
                assert s.write_file("k.cu", "// fine\n").ok
        assert router.status()["router"].get("internal_errors", 0) == 0


def test_router_load_forgets_sessions_the_server_reaped(tmp_path):
    binary = server_binary()
    if not binary.is_file():
        pytest.skip("no server binary")
    srv = ServerProcess("127.0.0.1", binary=str(binary), tasks_dir=str(tasks_dir()), state_dir=str(tmp_path / "s"),
                        extra_args=["--no-gpu", "--no-record", "--idle-timeout", "3"])
    try:
        with Router("tcp://127.0.0.1:0", stats_interval_s=0.2, dead_after_s=None) as router:
            router.add_server("a", srv.endpoint, srv.hello)
            router.run_in_thread()
            with d2k.Client(router.endpoint) as client:
                for i in range(4):
                    client.reset("vector_add", 0, seed=i)  # never closed: the server reaps them
                wait_for(lambda: router.status()["servers"][0]["sessions"] == 4, 5, "4 open sessions counted")
                wait_for(lambda: router.status()["servers"][0]["sessions"] == 0, 30,
                         "the reaped sessions to leave the router's load")
    finally:
        srv.stop()


def test_router_refuses_a_remote_bind_without_opt_in():
    from d2k.cluster.router import is_local_endpoint

    assert is_local_endpoint("tcp://127.0.0.1:5600") and is_local_endpoint("ipc:///tmp/r")
    assert not is_local_endpoint("tcp://0.0.0.0:5600") and not is_local_endpoint("tcp://10.1.2.3:5600")
    with pytest.raises(ValueError, match="without authentication"):
        Router("tcp://0.0.0.0:0")
    with Router("tcp://0.0.0.0:0", allow_remote=True) as router:  # said out loud: allowed
        assert router.endpoint.startswith("tcp://0.0.0.0:")

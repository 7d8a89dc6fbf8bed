"""``python -m d2k.cluster.bench --evaluate N`` (the H200 check of real evaluations through the
router) without a GPU: a scripted stand-in for ``d2k serve`` behind the real Router and real
sockets. The wait is bounded (exit 2 with the reason, never a hang), it prints what it waits for
(the server's preparation and a session's ``info.queue``) while it waits, and exits 0 when every
evaluation came back correct."""
from __future__ import annotations

import threading
import time
import uuid

import msgpack
import pytest
import zmq

from d2k.cluster import bench


class ScriptedServer:
    """Speaks enough protocol v1 for the bench: hello (one GPU), stats (a preparation under way),
    reset, write_file, observe (info.queue while an evaluation waits), close, and evaluate, which
    is answered `evaluate_after_s` after it arrived (None: never)."""

    def __init__(self, evaluate_after_s: float | None) -> None:
        self.evaluate_after_s = evaluate_after_s
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.hello = {"server": "d2k-gym", "version": "test", "protocol": [1],
                      "gpus": [{"index": 0, "name": "Scripted GPU"}], "limits": {}}
        self.log_path = "(scripted)"
        self.parked: list[tuple[float, list[bytes], int, str]] = []
        self.done = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def tail(self, n: int = 4000) -> str:
        return ("preparing cross_entropy on GPU 0: trusted builds: reference\n"
                "preparation of cross_entropy on GPU 0 gives way to vector_add (an evaluation waits for it)\n"
                "prepared vector_add on GPU 0 in 20.1 s (1/15 ready)\n")

    def stop(self, timeout_s: float = 40.0) -> None:
        self.stop_event.set()
        self.thread.join(5)
        self.socket.close(linger=0)
        self.context.term()

    def _reply(self, route: list[bytes], rid: int, body: dict) -> None:
        self.socket.send_multipart([*route, msgpack.packb({"v": 1, "id": rid, "ok": True, **body})])

    def _run(self) -> None:
        while not self.stop_event.is_set():
            now = time.monotonic()
            for item in [p for p in self.parked if self.evaluate_after_s is not None
                         and now - p[0] >= self.evaluate_after_s]:
                self.parked.remove(item)
                self.done += 1
                _, route, rid, _session = item
                evaluation = {"status": "ok", "time_s": 0.5, "workloads": [{"name": "w", "correct": True}]}
                self._reply(route, rid, {"observation": {"step": 2, "last": {"ok": True, "evaluation": evaluation}},
                                         "reward": 0.25, "terminated": False, "truncated": False,
                                         "info": {"queue": {"state": "ran_after_preparation",
                                                            "waited_for_preparation_s": 1.5}}})
            if not self.socket.poll(20):
                continue
            *route, payload = self.socket.recv_multipart()
            req = msgpack.unpackb(payload, raw=False)
            op, rid = req["op"], req["id"]
            if op == "hello":
                self._reply(route, rid, self.hello)
            elif op == "stats":
                self._reply(route, rid, {"sessions": {"active": 1}, "gpus": [{
                    "queue_depth": len(self.parked), "waiting_for_preparation": len(self.parked),
                    "evaluations": self.done,
                    "preparation": {"tasks": 15, "ready": 3, "failed": 0, "current": "vector_add",
                                    "stage": "calibration", "paused": False, "yields": 1, "done": False}}]})
            elif op == "reset":
                self._reply(route, rid, {"session": uuid.uuid4().hex,
                                         "observation": {"step": 0, "task": {"main_file": "kernel.cu"}}})
            elif op == "observe":
                waiting = any(p[3] == req["session"] for p in self.parked)
                info = {"queue": {"state": "waiting_for_preparation", "message": "the evaluation waits for "
                                  "task vector_add to be prepared on GPU 0 (calibration)"}} if waiting else {}
                self._reply(route, rid, {"observation": {"step": 1}, "info": info})
            elif op == "close":
                self._reply(route, rid, {})
            elif op == "step" and req["action"]["type"] == "evaluate":
                self.parked.append((time.monotonic(), route, rid, req["session"]))
            elif op == "step":
                self._reply(route, rid, {"observation": {"step": 1, "last": {"ok": True}}, "reward": 0.0})


@pytest.fixture()
def scripted(monkeypatch):
    made: list[ScriptedServer] = []

    def use(evaluate_after_s: float | None):
        def factory(*args, **kwargs):
            server = ScriptedServer(evaluate_after_s)
            made.append(server)
            return server
        monkeypatch.setattr(bench, "ServerProcess", factory)
    yield use
    for server in made:
        if not server.stop_event.is_set():
            server.stop()


def test_bench_evaluate_reports_progress_and_succeeds(scripted, capsys):
    scripted(2.5)
    assert bench.evaluate_through_router("vector_add", 3, timeout_s=60, progress_s=0.5) == 0
    out = capsys.readouterr().out
    assert "waiting: GPU 0: queue 3 (parked 3), evaluations done 0; prepared 3/15, preparing vector_add " \
           "(calibration), gave way 1x" in out
    assert "a session: waiting_for_preparation (the evaluation waits for task vector_add" in out
    assert out.count("status ok") == 3 and "waited 1.5 s for preparation" in out
    assert "3 evaluations through the router in" in out and "3 correct" in out
    assert "server log: preparation of cross_entropy on GPU 0 gives way to vector_add" in out
    assert "server log: prepared vector_add on GPU 0 in 20.1 s" in out


def test_bench_evaluate_wait_is_bounded(scripted, capsys):
    scripted(None)  # the evaluations never come back
    t0 = time.monotonic()
    assert bench.evaluate_through_router("vector_add", 2, timeout_s=3, progress_s=0.5) == 2
    assert time.monotonic() - t0 < 60
    out = capsys.readouterr().out
    assert "TIMEOUT: the evaluations did not finish in 3 s" in out
    assert "waiting: GPU 0" in out


def test_describe_progress_without_stats():
    assert bench.describe_progress({}, None) == "no stats from the server yet"

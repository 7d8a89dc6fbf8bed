"""What the router costs: ``python -m d2k.cluster.bench [--sessions N] [--calls N]`` (docs/scale.md).

Starts compile-only ``d2k serve`` processes (``$D2K_BIN``...) and a Router in this process, then
prints (1) the ``observe`` round trip p50/p99 directly and through the router, one request at a
time, and (2) the router's throughput: ``observe`` requests of N sessions pipelined on one socket
(the router's own thread is the limit; the servers are two processes).

``--evaluate N`` instead (a GPU machine): one ``d2k serve`` using its GPUs behind the router, N
sessions each writing the task's ``baseline.cu`` and evaluating it through the router, at once;
prints each evaluation's status, time and reward and exits 1 unless all are correct.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from ..client import Client
from .router import Router
from .serve import ServerProcess


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def round_trips(endpoint: str, session: str, calls: int) -> list[float]:
    out = []
    with Client(endpoint) as client:
        for _ in range(calls):
            t0 = time.perf_counter()
            client.observe(session)
            out.append((time.perf_counter() - t0) * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--task", default="vector_add")
    parser.add_argument("--evaluate", type=int, default=0,
                        help="GPU check: N real evaluations of the baseline through the router")
    args = parser.parse_args(argv)
    if args.evaluate:
        return evaluate_through_router(args.task, args.evaluate)
    state = tempfile.mkdtemp(prefix="d2k-router-bench-")
    servers = [ServerProcess("127.0.0.1", state_dir=f"{state}/s{i}",
                             extra_args=["--no-gpu", "--no-record", "--compile-workers", "1"])
               for i in range(args.servers)]
    try:
        with Router("tcp://127.0.0.1:0", dead_after_s=None) as router:
            for i, s in enumerate(servers):
                router.add_server(f"s{i}", s.endpoint, s.hello)
            router.run_in_thread()
            with Client(router.endpoint) as client:
                sessions = [client.reset(args.task, 0, seed=i).id for i in range(args.sessions)]
                owner = servers[int(router.session_server(sessions[0])[1:])]
                direct = round_trips(owner.endpoint, sessions[0], args.calls)
                routed = round_trips(router.endpoint, sessions[0], args.calls)
                size = len(str(client.observe(sessions[0])))
                print(f"observe round trip, one at a time ({args.calls} calls, ~{size} B observation):")
                for name, xs in (("direct", direct), ("router", routed)):
                    p50, p99 = _percentiles(xs)
                    print(f"  {name:7s} p50 {p50:8.1f} us   p99 {p99:8.1f} us   mean {statistics.fmean(xs):8.1f} us")
                rounds = max(1, args.calls // len(sessions))
                t0 = time.perf_counter()
                for _ in range(rounds):
                    for reply in client.request_many([("observe", {"session": s}) for s in sessions]):
                        assert isinstance(reply, dict), reply
                elapsed = time.perf_counter() - t0
                n = rounds * len(sessions)
                print(f"router throughput: {n} observe of {len(sessions)} sessions pipelined in {elapsed:.2f} s "
                      f"= {n / elapsed:.0f} requests/s")
                for s in sessions:
                    client.close_session(s)
    finally:
        for s in servers:
            s.stop()
    return 0


def evaluate_through_router(task: str, n: int) -> int:
    from pathlib import Path

    from ..registration import default_tasks_dir

    tasks = default_tasks_dir()
    baseline = (Path(tasks) / task / "baseline.cu").read_text()
    server = ServerProcess("127.0.0.1", state_dir=tempfile.mkdtemp(prefix="d2k-router-gpu-"),
                           extra_args=["--no-record"])
    try:
        gpus = server.hello.get("gpus") or []
        print(f"server: {len(gpus)} GPU(s) {[g.get('name') for g in gpus]}")
        if not gpus:
            print("no GPU: nothing to evaluate (this check is for a GPU machine)")
            return 1
        with Router("tcp://127.0.0.1:0", dead_after_s=None) as router:
            router.add_server("gpu0", server.endpoint, server.hello)
            router.run_in_thread()
            with Client(router.endpoint) as client:
                sessions = [client.reset(task, 0, seed=i) for i in range(n)]
                main_file = sessions[0].observation.get("task", {}).get("main_file", "kernel.cu")
                for s in sessions:
                    assert s.write_file(main_file, baseline).ok
                t0 = time.perf_counter()
                replies = client.request_many([("step", {"session": s.id, "action": {"type": "evaluate"}})
                                               for s in sessions])
                wall = time.perf_counter() - t0
                bad = 0
                for s, reply in zip(sessions, replies):
                    if not isinstance(reply, dict):
                        print(f"  {s.id[:8]}: error {reply}")
                        bad += 1
                        continue
                    ev = (reply["observation"].get("last") or {}).get("evaluation") or {}
                    ok = ev.get("status") == "ok" and all(w.get("correct") for w in ev.get("workloads", []))
                    bad += not ok
                    print(f"  {s.id[:8]} via {router.session_server(s.id)}: status {ev.get('status')}, "
                          f"time_s {ev.get('time_s')}, reward {reply.get('reward'):.3f}")
                print(f"{n} evaluations through the router in {wall:.2f} s, {n - bad} correct")
                for s in sessions:
                    s.close()
                return 0 if bad == 0 else 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())

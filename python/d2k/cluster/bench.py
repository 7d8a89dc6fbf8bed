"""What the router costs: ``python -m d2k.cluster.bench [--sessions N] [--calls N]`` (docs/scale.md).

Starts compile-only ``d2k serve`` processes (``$D2K_BIN``...) and a Router in this process, then
prints (1) the ``observe`` round trip p50/p99 directly and through the router, one request at a
time, and (2) the router's throughput: ``observe`` requests of N sessions pipelined on one socket
(the router's own thread is the limit; the servers are two processes).

``--curve``: the same with CURVE on every leg (client -> router -> servers), as between hosts.

``--evaluate N`` instead (a GPU machine): one ``d2k serve`` using its GPUs behind the router, N
sessions each writing the task's ``baseline.cu`` and evaluating it through the router, at once;
prints each evaluation's status, time and reward and exits 1 unless all are correct. The wait is
bounded (``--timeout``, default 240 s; exit 2 when it runs out) and says every ``--progress`` s
what it waits for: the server's preparation (task, stage, tasks ready, paused/yields), the GPU
queue, and ``info.queue`` of a waiting session. The server prepares every task of the catalogue
in the background; the evaluated task jumps that queue (env/prepare.hpp, demand first).
``--only-task`` serves a copy of that one task instead (preparation of one task only).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from typing import Any

from ..client import Client
from ..errors import ClientTimeout
from .router import Router
from .serve import ServerProcess, write_key_pair


def _percentiles(samples: list[float]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def round_trips(endpoint: str, session: str, calls: int, **keys: str) -> list[float]:
    out = []
    with Client(endpoint, **keys) as client:
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
    parser.add_argument("--curve", action="store_true",
                        help="CURVE on every leg (client -> router -> servers), as beyond loopback")
    parser.add_argument("--evaluate", type=int, default=0,
                        help="GPU check: N real evaluations of the baseline through the router")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="--evaluate: seconds to wait for the evaluations (exit 2 past it)")
    parser.add_argument("--progress", type=float, default=5.0,
                        help="--evaluate: seconds between progress lines")
    parser.add_argument("--gpu-resident", action="store_true",
                        help="--evaluate: write config gpu_resident=true explicitly (the server's default and only "
                             "path for agent code since false is refused; docs/threat-model.md class 11)")
    parser.add_argument("--only-task", action="store_true",
                        help="--evaluate: the server gets a copy of --task only (nothing else to prepare)")
    args = parser.parse_args(argv)
    if args.evaluate:
        return evaluate_through_router(args.task, args.evaluate, timeout_s=args.timeout,
                                       progress_s=args.progress, only_task=args.only_task,
                                       gpu_resident=args.gpu_resident)
    state = tempfile.mkdtemp(prefix="d2k-router-bench-")
    router_kw: dict[str, Any] = {}
    client_kw: dict[str, str] = {}
    if args.curve:  # every leg encrypted: client -> router -> servers
        keys = f"{state}/keys"
        write_key_pair(keys, "router")
        write_key_pair(keys, "client")
        with open(f"{keys}/allowed", "w") as f:
            f.write(open(f"{keys}/client.pub").read())
        router_kw = {"curve_key": f"{keys}/router.key", "allowed_keys": f"{keys}/allowed"}
        client_kw = {"server_key": f"{keys}/router.pub", "client_key": f"{keys}/client.key"}
    router = Router("tcp://127.0.0.1:0", dead_after_s=None, **router_kw)
    servers = [ServerProcess("127.0.0.1", state_dir=f"{state}/s{i}", curve=args.curve,
                             allow_keys=[router.public_key] if args.curve else [],
                             extra_args=["--no-gpu", "--no-record", "--compile-workers", "1"])
               for i in range(args.servers)]
    try:
        with router:
            for i, s in enumerate(servers):
                router.add_server(f"s{i}", s.endpoint, s.hello, server_key=s.server_key or None)
            router.run_in_thread()
            print(f"CURVE on every leg: {bool(args.curve)}")
            with Client(router.endpoint, **client_kw) as client:
                sessions = [client.reset(args.task, 0, seed=i).id for i in range(args.sessions)]
                routed = round_trips(router.endpoint, sessions[0], args.calls, **client_kw)
                # Directly: the same session belongs to the router's key on a CURVE server: use it.
                owner = servers[int(router.session_server(sessions[0])[1:])]
                direct_session = sessions[0]
                direct_kw = {}
                if args.curve:
                    direct_kw = {"server_key": owner.server_key, "client_key": f"{state}/keys/router.key"}
                direct = round_trips(owner.endpoint, direct_session, args.calls, **direct_kw)
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


def describe_progress(stats: dict[str, Any], waiting: dict[str, Any] | None) -> str:
    """One line: what the evaluations wait for, from the server's ``stats`` (as the router polls
    it) and a waiting session's ``info.queue``."""
    parts = []
    for i, g in enumerate(stats.get("gpus") or []):
        prep = g.get("preparation") or {}
        line = (f"GPU {i}: queue {g.get('queue_depth', '?')} (parked {g.get('waiting_for_preparation', '?')}), "
                f"evaluations done {g.get('evaluations', '?')}")
        if prep:
            line += f"; prepared {prep.get('ready', '?')}/{prep.get('tasks', '?')}"
            if prep.get("current"):
                line += f", preparing {prep['current']} ({prep.get('stage')})"
            if prep.get("paused"):
                line += ", paused for evaluations"
            if prep.get("yields"):
                line += f", gave way {prep['yields']}x"
            if prep.get("failed"):
                line += f", failed {prep['failed']}: {prep.get('errors')}"
        parts.append(line)
    if waiting:
        parts.append(f"a session: {waiting.get('state')} ({waiting.get('message') or waiting.get('stage') or ''})")
    return "; ".join(parts) or "no stats from the server yet"


def evaluate_through_router(task: str, n: int, *, timeout_s: float = 240.0, progress_s: float = 5.0,
                            only_task: bool = False, gpu_resident: bool = False) -> int:
    from pathlib import Path

    from ..registration import default_tasks_dir

    t_start = time.perf_counter()

    def stamp() -> str:
        return f"[{time.perf_counter() - t_start:6.1f} s]"

    tasks = Path(default_tasks_dir())
    baseline = (tasks / task / "baseline.cu").read_text()
    state = tempfile.mkdtemp(prefix="d2k-router-gpu-")
    tasks_dir = None
    if only_task:
        tasks_dir = f"{state}/tasks"
        shutil.copytree(tasks / task, f"{tasks_dir}/{task}")
    extra = ["--no-record"]
    if gpu_resident:
        config = f"{state}/config.json"
        with open(config, "w") as f:
            json.dump({"gpu_resident": True}, f)
        extra += ["--config", config]
    server = ServerProcess("127.0.0.1", state_dir=state, tasks_dir=tasks_dir, extra_args=extra)
    try:
        gpus = server.hello.get("gpus") or []
        print(f"{stamp()} server: {len(gpus)} GPU(s) {[g.get('name') for g in gpus]} (log {server.log_path})",
              flush=True)
        if not gpus:
            print("no GPU: nothing to evaluate (this check is for a GPU machine)")
            return 1
        with Router("tcp://127.0.0.1:0", stats_interval_s=0.5, dead_after_s=None) as router:
            router.add_server("gpu0", server.endpoint, server.hello)
            router.run_in_thread()
            with Client(router.endpoint) as client:
                sessions = [client.reset(task, 0, seed=i) for i in range(n)]
                main_file = sessions[0].observation.get("task", {}).get("main_file", "kernel.cu")
                for s in sessions:
                    assert s.write_file(main_file, baseline).ok
                print(f"{stamp()} {n} session(s) of {task} opened through the router; evaluating "
                      f"(bounded: {timeout_s:.0f} s)", flush=True)
                box: dict[str, Any] = {}

                def evaluate_all() -> None:  # its own client: a Client is one thread's
                    try:
                        with Client(router.endpoint) as c:
                            box["replies"] = c.request_many(
                                [("step", {"session": s.id, "action": {"type": "evaluate"}}) for s in sessions],
                                timeout=timeout_s)
                    except Exception as exc:  # reported below, never a hang
                        box["error"] = exc

                t0 = time.perf_counter()
                worker = threading.Thread(target=evaluate_all, daemon=True)
                worker.start()
                with Client(router.endpoint, timeout=5.0) as watcher:
                    while worker.is_alive() and time.perf_counter() - t0 < timeout_s + 10:
                        worker.join(progress_s)
                        if not worker.is_alive():
                            break
                        servers = router.status()["servers"]
                        stats = servers[0]["stats"] if servers else {}
                        waiting = None
                        try:
                            waiting = (watcher.observe(sessions[0].id).get("info") or {}).get("queue")
                        except Exception as exc:  # the watch is best effort
                            waiting = {"state": "observe failed", "message": str(exc)}
                        print(f"{stamp()} waiting: {describe_progress(stats, waiting)}", flush=True)
                wall = time.perf_counter() - t0
                timed_out = [r for r in box.get("replies", []) if isinstance(r, ClientTimeout)]
                if worker.is_alive() or "error" in box or "replies" not in box or timed_out:
                    print(f"{stamp()} TIMEOUT: the evaluations did not finish in {timeout_s:.0f} s "
                          f"({box.get('error', 'still running')}); server log tail:\n{server.tail(3000)}")
                    return 2
                bad = 0
                for s, reply in zip(sessions, box["replies"]):
                    if not isinstance(reply, dict):
                        print(f"  {s.id[:8]}: error {reply}")
                        bad += 1
                        continue
                    ev = (reply["observation"].get("last") or {}).get("evaluation") or {}
                    ok = ev.get("status") == "ok" and all(w.get("correct") for w in ev.get("workloads", []))
                    bad += not ok
                    queue = (reply.get("info") or {}).get("queue") or {}
                    waited = queue.get("waited_for_preparation_s")
                    print(f"  {s.id[:8]} via {router.session_server(s.id)}: status {ev.get('status')}, "
                          f"time_s {ev.get('time_s')}, reward {reply.get('reward'):.3f}"
                          + (f", waited {waited:.1f} s for preparation" if isinstance(waited, (int, float)) else ""))
                print(f"{stamp()} {n} evaluations through the router in {wall:.2f} s, {n - bad} correct")
                shown = [line for line in server.tail(200_000).splitlines()
                         if "gives way" in line or f"prepared {task} " in line]
                for line in shown[:6]:
                    print(f"  server log: {line.strip()[:300]}")
                for s in sessions:
                    s.close()
                return 0 if bad == 0 else 1
    finally:
        server.stop(timeout_s=15)  # a preparation under way finishes first: bounded, then SIGKILL


if __name__ == "__main__":
    raise SystemExit(main())

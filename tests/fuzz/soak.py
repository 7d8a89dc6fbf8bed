#!/usr/bin/env python3
"""A bounded many-session soak against a real `d2k serve` (real ZeroMQ, real episode logs).

    soak.py [--sessions 1000] [--duration 60] [--clients 8] [--window 64] [--seed S] [--bin build/bin/d2k]

Keeps --sessions sessions open at once for --duration seconds, spread over --clients DEALER sockets
with up to --window requests in flight (one per session at a time). Each session takes a random
walk of actions (observe, write_file, edit, patch, now and then a compile of its fresh starter
workspace, which the compile cache soon answers) and is closed after a random number of steps and
replaced by a new one. Now and then a completed step is re-sent with the same id: its reply must
be byte-identical. At the end every session is closed, the server is stopped with SIGTERM, and every
episode log on disk is compared with what the clients received:
  - every request got exactly one reply (nothing lost, nothing unanswered, nothing unexpected);
  - every reply received is in its session's log, in order, equal to the one received; no log
    holds an exchange the client never received; every log has its end record and no torn tail.
Server memory (RSS) is sampled and printed, never asserted. Exit status 0 when no problem was found.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from pathlib import Path

import msgpack
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import d2klive  # noqa: E402

REPLY_TIMEOUT_S = 300.0  # a cold compile on a loaded machine; a reply later than this is "lost"


class Session:
    __slots__ = ("sid", "client", "steps_left", "files", "exchanges", "last", "n_steps", "closing",
                 "compile_first")

    def __init__(self, client: int, steps_left: int, compile_first: bool):
        self.sid: str | None = None
        self.client = client
        self.steps_left = steps_left
        self.files: dict[str, str] = {}  # files this session wrote, with their content
        self.exchanges: list[tuple[int, dict]] = []
        self.last: tuple[bytes, bytes] | None = None  # (request, reply bytes) of the last completed step
        self.n_steps = 0
        self.closing = False
        self.compile_first = compile_first


class Soak:
    def __init__(self, args: argparse.Namespace, server: d2klive.LiveServer, task: str):
        self.a = args
        self.server = server
        self.task = task
        self.rng = random.Random(args.seed)
        self.sockets = [server.dealer(identity=f"soak-{i}-{args.seed}".encode()) for i in range(args.clients)]
        self.poller = zmq.Poller()
        for s in self.sockets:
            self.poller.register(s, zmq.POLLIN)
        self.next_id = self.rng.randrange(1, 1 << 40)
        # id -> (session, sent at, kind, request bytes); kind: "reset" | "step" | "observe" | "close" | "retry"
        self.pending: dict[int, tuple[Session, float, str, bytes]] = {}
        self.ready: deque[Session] = deque()
        self.done: list[Session] = []
        self.problems: list[str] = []
        self.counts = {"requests": 0, "replies": 0, "retries": 0, "errors": 0, "compiles": 0, "sessions": 0}
        self.error_codes: dict[str, int] = {}
        self.rss: list[int] = []
        self.peak_open = 0
        self.elapsed = 0.0
        self.opened: list[Session] = []  # every session whose reset succeeded
        self.killed_pending: set[str | None] | None = None  # with --kill-after: sessions with a request in flight
        self.resets_pending = 0

    def problem(self, msg: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(msg)

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def send(self, sess: Session, kind: str, req: dict, same_bytes: bytes | None = None) -> None:
        data = same_bytes if same_bytes is not None else msgpack.packb(req)
        rid = req["id"]
        self.sockets[sess.client].send(data)
        self.pending[rid] = (sess, time.monotonic(), kind, data)
        self.counts["requests"] += 1

    def open_session(self) -> None:
        sess = Session(self.rng.randrange(self.a.clients), self.rng.randint(3, self.a.max_steps),
                       self.rng.random() < self.a.compile_fraction)
        self.counts["sessions"] += 1
        self.send(sess, "reset", {"v": 1, "id": self.fresh_id(), "op": "reset", "task": self.task,
                                  "layer": self.rng.randrange(4),
                                  "options": {"max_steps": 1000, "label": "soak"}})

    def action(self, sess: Session) -> dict:
        r = self.rng.random()
        if sess.compile_first and sess.n_steps == 0:
            self.counts["compiles"] += 1
            return {"type": "compile"}
        if not sess.files or r < 0.30:
            path = f"soak/f{self.rng.randrange(4)}.cuh"
            content = "".join(f"// line {i} {self.rng.randrange(1 << 30)}\n" for i in range(self.rng.randint(1, 40)))
            sess.files[path] = content
            return {"type": "write_file", "path": path, "content": content}
        path = self.rng.choice(sorted(sess.files))
        lines = sess.files[path].splitlines(keepends=True)
        i = self.rng.randrange(len(lines))
        new_line = f"// edited {self.rng.randrange(1 << 30)}\n"
        if r < 0.65:
            # The file's line i, made unique by its random number; the edit replaces it.
            sess.files[path] = "".join(lines[:i] + [new_line] + lines[i + 1:])
            return {"type": "edit", "path": path, "old": lines[i], "new": new_line}
        # A unified diff replacing line i (1-based i+1), with up to 2 lines of context before it.
        start = max(0, i - 2)
        ctx = lines[start:i]
        hunk = [f"@@ -{start + 1},{len(ctx) + 1} +{start + 1},{len(ctx) + 1} @@\n"]
        hunk += [" " + x for x in ctx] + ["-" + lines[i], "+" + new_line]
        sess.files[path] = "".join(lines[:i] + [new_line] + lines[i + 1:])
        return {"type": "patch", "diff": f"--- a/{path}\n+++ b/{path}\n" + "".join(hunk)}

    def next_request(self, sess: Session) -> None:
        if sess.steps_left <= 0:
            sess.closing = True
            self.send(sess, "close", {"v": 1, "id": self.fresh_id(), "op": "close", "session": sess.sid})
            return
        sess.steps_left -= 1
        r = self.rng.random()
        if sess.last is not None and r < self.a.retry_fraction:
            self.counts["retries"] += 1
            self.send(sess, "retry", msgpack.unpackb(sess.last[0]), same_bytes=sess.last[0])
            return
        if r < 0.35:
            self.send(sess, "observe", {"v": 1, "id": self.fresh_id(), "op": "observe", "session": sess.sid})
            return
        self.send(sess, "step", {"v": 1, "id": self.fresh_id(), "op": "step", "session": sess.sid,
                                 "action": self.action(sess)})
        sess.n_steps += 1

    def on_reply(self, data: bytes) -> None:
        self.counts["replies"] += 1
        try:
            reply = d2klive.unpack(data)
        except Exception as e:  # noqa: BLE001
            self.problem(f"undecodable reply: {e}")
            return
        rid = reply.get("id")
        entry = self.pending.pop(rid, None)
        if entry is None:
            self.problem(f"a reply to no request in flight: id {rid} {str(reply)[:200]}")
            return
        sess, _, kind, req_bytes = entry
        ok = reply.get("ok") is True
        if not ok:
            code = str(reply.get("error", {}).get("code"))
            self.counts["errors"] += 1
            self.error_codes[code] = self.error_codes.get(code, 0) + 1
        if kind == "retry":
            if data != sess.last[1]:
                self.problem(f"session {sess.sid}: retry of id {rid} got a reply that differs from the first")
            self.ready.append(sess)
            return
        if kind == "reset":
            if not ok:
                self.problem(f"reset failed: {reply.get('error')}")
                return
            sess.sid = reply["session"]
            self.opened.append(sess)
            sess.exchanges.append((rid, reply))
            self.ready.append(sess)
            return
        sess.exchanges.append((rid, reply))
        if not ok:
            self.problem(f"session {sess.sid}: {kind} id {rid} failed: {reply.get('error')}")
        elif kind == "step":
            last = reply.get("observation", {}).get("last") or {}
            if last.get("ok") is False and last.get("action") != "compile":
                self.problem(f"session {sess.sid}: step id {rid} did not apply: {str(last)[:300]}")
        if kind == "step":
            sess.last = (req_bytes, data)
        if kind == "close":
            self.done.append(sess)
            return
        self.ready.append(sess)

    def pump(self, timeout_ms: int) -> None:
        for s, _ in self.poller.poll(timeout_ms):
            while True:
                try:
                    data = s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self.on_reply(data)

    def check_overdue(self) -> None:
        now = time.monotonic()
        for rid, (sess, t, kind, _) in list(self.pending.items()):
            if now - t > REPLY_TIMEOUT_S:
                self.problem(f"no reply within {REPLY_TIMEOUT_S:.0f} s to {kind} id {rid} of session {sess.sid}")
                del self.pending[rid]

    def run(self) -> None:
        a = self.a
        t0 = time.monotonic()
        last_sample = 0.0
        opened = 0
        # Ramp up: open every session (within the window), then the random walk until the end.
        while time.monotonic() - t0 < a.duration:
            if not self.server.alive():
                self.problem(f"the server exited ({self.server.proc.returncode}) during the soak")
                self.elapsed = time.monotonic() - t0
                return
            live = opened - len(self.done)
            while len(self.pending) < a.window and live < a.sessions:
                self.open_session()
                opened += 1
                live += 1
            self.peak_open = max(self.peak_open, live)
            while self.ready and len(self.pending) < a.window:
                self.next_request(self.ready.popleft())
            self.pump(100)
            if a.kill_after is not None and time.monotonic() - t0 >= a.kill_after:
                # SIGKILL with requests in flight: what a client holds must be in the logs anyway.
                self.killed_pending = {sess.sid for sess, _, kind, _ in self.pending.values()}
                self.resets_pending = sum(1 for _, _, kind, _ in self.pending.values() if kind == "reset")
                self.server.proc.kill()
                self.server.proc.wait()
                self.elapsed = time.monotonic() - t0
                self.rss.append(0)
                return
            if time.monotonic() - last_sample > 2.0:
                last_sample = time.monotonic()
                self.rss.append(self.server.rss_kib())
                self.check_overdue()
        self.ramp_s = time.monotonic() - t0
        # Drain: no new sessions; close every open one after its request in flight.
        for sess in self.ready:
            sess.steps_left = 0
        drain_deadline = time.monotonic() + REPLY_TIMEOUT_S
        while (self.pending or self.ready) and time.monotonic() < drain_deadline and self.server.alive():
            while self.ready and len(self.pending) < a.window:
                sess = self.ready.popleft()
                sess.steps_left = 0
                self.next_request(sess)
            self.pump(100)
        # Requests still in flight were sent before the close of their session was possible.
        for sess, _, kind, _ in self.pending.values():
            self.problem(f"no reply to {kind} of session {sess.sid} by the end of the drain")
        self.rss.append(self.server.rss_kib())
        self.elapsed = time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=1000, help="sessions open at once (default 1000)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load before the drain (default 60)")
    p.add_argument("--clients", type=int, default=8, help="DEALER sockets (default 8)")
    p.add_argument("--window", type=int, default=64, help="requests in flight at once (default 64)")
    p.add_argument("--max-steps", type=int, default=40, help="a session is closed after 3..this many requests")
    p.add_argument("--compile-fraction", type=float, default=0.02, help="sessions whose first step is a compile")
    p.add_argument("--retry-fraction", type=float, default=0.03, help="requests that re-send the last step")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--bin", type=Path, default=d2klive.default_binary())
    p.add_argument("--tasks", type=Path, default=d2klive.default_tasks())
    p.add_argument("--task", default="vector_add")
    p.add_argument("--kill-after", type=float, default=None,
                   help="SIGKILL the server after this many seconds of load instead of a clean stop; then every "
                        "reply received must still be in the logs (a log may hold one more exchange, sent or not)")
    p.add_argument("--keep", action="store_true", help="keep the state dir (logs) for inspection")
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    if not a.bin.exists():
        print(f"soak: no server binary at {a.bin} (build the d2k target or pass --bin)", file=sys.stderr)
        return 2
    print(f"soak: seed {a.seed}, {a.sessions} sessions, {a.duration:.0f} s, {a.clients} clients, window {a.window}",
          flush=True)
    server = d2klive.LiveServer(a.bin, a.tasks, max_sessions=a.sessions + 8, keep=a.keep)
    try:
        server.wait_ready()
        soak = Soak(a, server, a.task)
        soak.run()
        killed = soak.killed_pending is not None
        rc = server.stop(grace=120)
        if rc != 0 and not killed:
            soak.problem(f"server exit status {rc} after SIGTERM")
        unreadable: list[str] = []
        logs = d2klive.logs_by_session(server.log_dir, unreadable)
        # After SIGKILL, a reset in flight may have left a log without its header yet.
        for msg in unreadable[soak.resets_pending if killed else 0:]:
            soak.problem(f"unreadable episode log: {msg}")
        sessions = soak.opened
        log_problems = 0
        for sess in sessions:
            in_flight = killed and sess.sid in soak.killed_pending
            for msg in d2klive.check_session_log(logs.pop(sess.sid, None), sess.exchanges,
                                                 expect_end=sess in soak.done, killed=killed,
                                                 may_hold_one_more=in_flight):
                log_problems += 1
                soak.problem(f"session {sess.sid}: {msg}")
        # After SIGKILL, a reset in flight may be logged with its reply never sent.
        strays = [sid for sid, log in logs.items() if not (killed and len(log.exchanges) <= 1)]
        if killed and len(logs) - len(strays) > soak.resets_pending:
            strays = list(logs)
        for sid in strays:
            soak.problem(f"a log of session {sid} that no client opened")
        c = soak.counts
        exchanges = sum(len(s.exchanges) for s in sessions)
        rss = soak.rss or [0]
        print(f"soak: {c['sessions']} sessions (at most {soak.peak_open} open at once), {c['requests']} requests, {c['replies']} replies, "
              f"{c['retries']} retries, {c['compiles']} compiles, {c['errors']} error replies {soak.error_codes}, "
              f"in {soak.elapsed:.1f} s ({c['replies'] / max(soak.elapsed, 1e-9):.0f} replies/s)")
        print(f"soak: {exchanges} exchanges of {len(sessions)} sessions ({len(soak.done)} closed) checked against their logs "
              f"(checksums {'verified' if d2klive._xxh3 else 'not verified: no libxxhash'}): "
              f"{log_problems} problems")
        print(f"soak: server RSS MiB first/peak/last: {rss[0] / 1024:.0f}/{max(rss) / 1024:.0f}/{rss[-1] / 1024:.0f}")
        if soak.problems:
            print(f"soak: FAIL, {len(soak.problems)} problem(s) (first 50):", file=sys.stderr)
            for m in soak.problems:
                print("  " + m, file=sys.stderr)
            print("soak: server log tail:\n" + server.tail(), file=sys.stderr)
            return 1
        print("soak: PASS")
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A protocol fuzzer against a live `d2k serve` (real ZeroMQ sockets, real episode logs).

    protofuzz.py [--duration 60] [--frames N] [--victims 4] [--seed S] [--no-huge] [--bin build/bin/d2k]

While a few "victim" sessions run ordinary episodes on their own socket, fuzz sockets send frames
made from valid requests (hello, list_tasks, reset, step of every action type, observe, close, stats)
by: byte mutations of the MessagePack (bit flips, type bytes such as 0xc1/ext/huge containers,
inserts, deletes, truncation, trailing bytes, splices), structural ones (a field replaced by a value
of another type, removed, an unknown field added; duplicate and non-string keys, nesting past the
depth limit, invalid UTF-8, declared lengths far past the frame), multipart oddities (empty frames,
extra frames before the payload, REQ-style delimiters, an empty last frame) and oversize frames
(just over max_message_bytes with a readable id; once per run, over the 16x cut-off that ZeroMQ drops).
One frame is in flight per fuzz socket, so every reply is attributed to its frame. Checked:
  - the server stays up and answers hello on a fresh socket throughout (no crash, no hang);
  - every frame under the cut-off gets exactly one reply within 60 s, the frames before the payload
    echoed in front of it; a reply is a map {v:1, id, ok, ...}, an error has a known code, the
    right `retryable` and a message of at most 2048 bytes;
  - a reply's id is the frame's id (as Python reads it) or nil, and nil only when the server could
    not read one (bad_request, too_large);
  - the victims' every step succeeds and, after the server is stopped, each victim's episode log holds
    exactly the exchanges its client received (d2klive.check_session_log).
Exit status 0 when no problem was found; the problems found and the seed to repeat them otherwise.
"""
from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import d2klive  # noqa: E402

CODES = {"bad_request", "version_mismatch", "unknown_op", "unknown_session", "unknown_task", "invalid_action",
         "path_violation", "too_large", "busy", "capacity", "timeout", "sandbox_violation", "no_gpu",
         "episode_ended", "budget_exhausted", "shutting_down", "internal"}
RETRYABLE = {"busy", "capacity", "timeout", "shutting_down"}
REPLY_TIMEOUT_S = 60.0
INTERESTING_BYTES = [0x00, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6,
                     0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcf, 0xd3, 0xd4, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde,
                     0xdf, 0xe0, 0xff]


def peek_id(frame: bytes) -> tuple[bool, Any]:
    """(decodable, id) as a strict reader sees the frame: decodable means one map, nothing after it."""
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:  # noqa: BLE001
        return False, None
    if not isinstance(value, dict):
        return True, None
    return True, value.get("id")


class Fuzzer:
    def __init__(self, a: argparse.Namespace, server: d2klive.LiveServer, hello: dict):
        self.a = a
        self.server = server
        self.rng = random.Random(a.seed)
        self.limits = hello.get("limits", {})
        self.max_msg = int(self.limits.get("max_message_bytes", 8 << 20))
        self.next_id = self.rng.randrange(1, 1 << 40)
        self.problems: list[str] = []
        self.counts: dict[str, int] = {"frames": 0, "replies": 0, "ok": 0, "no_reply_expected": 0, "sessions": 0}
        self.codes: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self.fuzz_sessions: list[str] = []  # sessions the fuzzer opened (valid ids for its templates)
        self.to_close: list[str] = []
        self.sockets = [server.dealer() for _ in range(a.sockets)]
        self.inflight: dict[zmq.Socket, tuple[float, list[bytes], str, bytes]] = {}
        self.poller = zmq.Poller()
        for s in self.sockets:
            self.poller.register(s, zmq.POLLIN)

    def problem(self, msg: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(msg)

    def fid(self) -> int:
        self.next_id += 1
        return self.next_id

    # ---- valid requests (the templates every mutation starts from) ----
    def session(self) -> str:
        if self.fuzz_sessions and self.rng.random() < 0.9:
            return self.rng.choice(self.fuzz_sessions[-4:])
        return self.rng.choice(["", "x", "0" * 16, "f" * 32, "../../etc", "\u00e9" * 8])

    def action(self) -> dict:
        k = self.rng.random()
        path = self.rng.choice(["kernel.cu", "a.cuh", "d/e.h", "x.hpp", "../k.cu", "/etc/passwd", "a//b.cu",
                                "kernel.cu/x.cu", "a" * 140 + ".cu", "nul\0.cu", "é.cu"])
        if k < 0.30:
            return {"type": "write_file", "path": path, "content": "// " + "x" * self.rng.randrange(64) + "\n"}
        if k < 0.55:
            return {"type": "edit", "path": path, "old": self.rng.choice(["x", "// ", "\n", "__global__"]),
                    "new": self.rng.choice(["", "y", "// z\n"])}
        if k < 0.80:
            diff = self.rng.choice([
                "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -1,1 +1,1 @@\n-x\n+y\n",
                "--- /dev/null\n+++ b/new.cuh\n@@ -0,0 +1,2 @@\n+a\n+b\n",
                "--- a/a.cuh\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
                "diff --git a/a.cu b/b.cu\nrename from a.cu\nrename to b.cu\n",
                "--- a/k.cu\n+++ b/k.cu\n@@ -99999999999,1 +1 @@\n-a\n+b\n\\ No newline at end of file\n",
                "@@ -1 +1 @@\n-a\n+b\n", ""])
            return {"type": "patch", "diff": diff}
        if k < 0.83:
            return {"type": "compile"}
        return {"type": self.rng.choice(["evaluate", "submit", "nope", "", "write_file"])}

    def template(self) -> dict:
        op = self.rng.choice(["hello", "list_tasks", "reset", "step", "step", "step", "observe", "close", "stats"])
        r: dict[str, Any] = {"v": 1, "id": self.fid(), "op": op}
        if op == "reset":
            r["task"] = self.rng.choice(["vector_add", "softmax", "nope", ""])
            r["layer"] = self.rng.randrange(5)
            if self.rng.random() < 0.5:
                r["seed"] = self.rng.randrange(1 << 64)
            if self.rng.random() < 0.5:
                r["options"] = {"max_steps": self.rng.randrange(3), "label": "f" * self.rng.randrange(300),
                                "wall_seconds": self.rng.choice([0, -1.0, 1e308, 5, 2.5]), "record": False}
        elif op in ("step", "observe", "close"):
            r["session"] = self.session()
            if op == "step":
                r["action"] = self.action()
        return r

    # ---- mutations ----
    def rand_value(self, depth: int = 0) -> Any:
        k = self.rng.randrange(12)
        if k == 0: return None
        if k == 1: return self.rng.random() < 0.5
        if k == 2: return self.rng.choice([0, 1, 2, 3, 127, 128, 255, 256, 65535, 1 << 32, (1 << 64) - 1])
        if k == 3: return -self.rng.randrange(1, 1 << 63)
        if k == 4: return self.rng.choice([0.0, 1.0, -0.5, float("inf"), float("nan"), 1e300])
        if k == 5: return "s" * self.rng.randrange(40)
        if k == 6: return bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(16)))
        if k == 7 and depth < 3: return [self.rand_value(depth + 1) for _ in range(self.rng.randrange(4))]
        if k == 8 and depth < 3: return {f"k{i}": self.rand_value(depth + 1) for i in range(self.rng.randrange(4))}
        if k == 9: return self.rng.choice(["hello", "step", "reset", "vector_add", "write_file", "kernel.cu"])
        if k == 10: return msgpack.ExtType(self.rng.randrange(128), b"\x01\x02")
        return "\u00e9\u4e2d"

    def structural(self, req: dict) -> tuple[str, bytes]:
        k = self.rng.randrange(10)
        target = req
        if "action" in req and self.rng.random() < 0.5:
            target = req["action"]
        elif "options" in req and self.rng.random() < 0.5:
            target = req["options"]
        keys = list(target)
        if k <= 2 and keys:
            target[self.rng.choice(keys)] = self.rand_value()
            return "retype", msgpack.packb(req)
        if k == 3 and keys:
            del target[self.rng.choice(keys)]
            return "drop_field", msgpack.packb(req)
        if k == 4:
            target[self.rng.choice(["zz", "trace", "ID", "v "])] = self.rand_value()
            return "unknown_field", msgpack.packb(req)
        if k == 5:  # duplicate key: a map header one larger, the pair repeated
            body = b"".join(msgpack.packb(kk) + msgpack.packb(vv) for kk, vv in req.items())
            kk = self.rng.choice(list(req))
            return "dup_key", self.map_header(len(req) + 1) + body + msgpack.packb(kk) + msgpack.packb(self.rand_value())
        if k == 6:  # a non-string key
            body = b"".join(msgpack.packb(kk) + msgpack.packb(vv) for kk, vv in req.items())
            odd = self.rng.choice([msgpack.packb(1), msgpack.packb(b"id"), msgpack.packb(None), b"\x90", b"\x80"])
            return "odd_key", self.map_header(len(req) + 1) + body + odd + msgpack.packb(0)
        if k == 7:  # nesting past max_depth (or just under it)
            depth = self.rng.choice([15, 16, 17, 64, 2000])
            nested = b"\x91" * depth + b"\xc0"
            return "deep", self.map_header(len(req) + 1) + b"".join(
                msgpack.packb(kk) + msgpack.packb(vv) for kk, vv in req.items()) + msgpack.packb("deep") + nested
        if k == 8:  # invalid UTF-8 in a string (str or bin)
            bad = self.rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"a\xe2\x82"])
            hdr = self.rng.choice([bytes([0xa0 | len(bad)]), bytes([0xc4, len(bad)])])
            field_name = self.rng.choice(["op", "session", "task", "zz"])
            items = {kk: vv for kk, vv in req.items() if kk != field_name}
            return "bad_utf8", self.map_header(len(items) + 1) + b"".join(
                msgpack.packb(kk) + msgpack.packb(vv) for kk, vv in items.items()) + msgpack.packb(field_name) + hdr + bad
        # declared sizes far beyond the frame (must not allocate what was declared)
        decl = self.rng.choice([b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
                                b"\xc6\x7f\xff\xff\xff", b"\xdc\xff\xff", b"\xde\x10\x00"])
        return "huge_decl", self.map_header(len(req) + 1) + b"".join(
            msgpack.packb(kk) + msgpack.packb(vv) for kk, vv in req.items()) + msgpack.packb("x") + decl + b"\x00" * 8

    @staticmethod
    def map_header(n: int) -> bytes:
        return bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)

    def byte_mutate(self, data: bytes) -> tuple[str, bytes]:
        b = bytearray(data)
        for _ in range(self.rng.randint(1, 4)):
            k = self.rng.randrange(8)
            if not b:
                b = bytearray(b"\x80")
            i = self.rng.randrange(len(b))
            if k == 0:
                b[i] ^= 1 << self.rng.randrange(8)
            elif k == 1:
                b[i] = self.rng.choice(INTERESTING_BYTES)
            elif k == 2:
                b[i:i] = bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 8)))
            elif k == 3:
                del b[i:i + self.rng.randint(1, 8)]
            elif k == 4:
                del b[i:]
            elif k == 5:
                b += bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 4)))
            elif k == 6:
                j = self.rng.randrange(len(b))
                b[i:i] = b[min(i, j):max(i, j)][:64]
            else:
                other = msgpack.packb(self.template())
                b = b[:i] + other[self.rng.randrange(len(other)):]
        return "bytes", bytes(b)

    def frame(self) -> tuple[str, list[bytes]]:
        """One fuzz message: its kind and its ZeroMQ parts (the payload last)."""
        req = self.template()
        k = self.rng.random()
        if k < 0.10:
            kind, payload = "valid", msgpack.packb(req)
        elif k < 0.55:
            kind, payload = self.byte_mutate(msgpack.packb(req))
        elif k < 0.92:
            kind, payload = self.structural(req)
        elif k < 0.97:
            kind, payload = "non_map", self.rng.choice([
                b"", b"\xc0", b"\x90", b"\x01", b"\xa3abc", msgpack.packb([req]), msgpack.packb(req) * 2,
                b"\x81\xa2id\x05", b"\xc1", bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(64)))])
        else:
            req["pad"] = b"\x00" * (self.max_msg + self.rng.randint(1, 4096) - 64)
            kind, payload = "oversize", msgpack.packb(req)
        parts = [payload]
        m = self.rng.random()
        if m < 0.06:
            parts = [b""] + parts  # REQ-style delimiter
            kind += "+delim"
        elif m < 0.10:
            parts = [bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(40))) for _ in
                     range(self.rng.randint(1, 5))] + parts
            kind += "+prefix"
        elif m < 0.12:
            parts = parts + [b""]  # the payload is the last frame: here an empty one
            kind += "+empty_last"
        elif m < 0.13:
            parts = parts + [msgpack.packb(self.template())]  # two payloads: the last one counts
            kind += "+two_payloads"
        return kind, parts

    # ---- checking ----
    def check_reply(self, parts: list[bytes], sent: list[bytes], kind: str) -> None:
        self.counts["replies"] += 1
        if parts[:-1] != sent[:-1]:
            self.problem(f"{kind}: the frames before the payload were not echoed: sent {sent[:-1]!r:.120} got {parts[:-1]!r:.120}")
        try:
            reply = d2klive.unpack(parts[-1])
        except Exception as e:  # noqa: BLE001
            self.problem(f"{kind}: undecodable reply: {e}")
            return
        if not isinstance(reply, dict) or reply.get("v") != 1 or not isinstance(reply.get("ok"), bool):
            self.problem(f"{kind}: malformed reply {str(reply)[:200]}")
            return
        decodable, fid = peek_id(sent[-1])
        rid = reply.get("id")
        valid_id = isinstance(fid, int) and not isinstance(fid, bool) and fid >= 1
        if reply["ok"]:
            self.counts["ok"] += 1
            if rid != fid:
                self.problem(f"{kind}: ok reply with id {rid}, frame id {fid}")
            if "session" in reply and isinstance(reply["session"], str) and "observation" in reply:
                self.counts["sessions"] += 1
                self.fuzz_sessions.append(reply["session"])
                if len(self.fuzz_sessions) > 8:
                    self.to_close.append(self.fuzz_sessions.pop(0))
            return
        err = reply.get("error")
        if not isinstance(err, dict):
            self.problem(f"{kind}: error reply without an error map: {str(reply)[:200]}")
            return
        code = err.get("code")
        self.codes[str(code)] = self.codes.get(str(code), 0) + 1
        if code not in CODES:
            self.problem(f"{kind}: unknown error code {code!r}")
        if code == "internal":
            self.problem(f"{kind}: internal error: {str(err.get('message'))[:300]} (frame {sent[-1][:200]!r})")
        if err.get("retryable") is not (code in RETRYABLE):
            self.problem(f"{kind}: {code} with retryable={err.get('retryable')!r}")
        msg = err.get("message")
        if not isinstance(msg, str) or len(msg.encode()) > 2048:
            self.problem(f"{kind}: error message not a str of <= 2048 bytes ({type(msg).__name__})")
        if kind.startswith("oversize") and not kind.endswith(("+empty_last", "+two_payloads")):
            if code != "too_large" or rid != fid:
                self.problem(f"{kind}: a frame over max_message_bytes with id {fid} got {code} with id {rid}")
        if rid is not None:
            if decodable and rid != fid and code not in ("bad_request", "too_large"):
                self.problem(f"{kind}: {code} reply with id {rid}, frame id {fid}")
        elif decodable and valid_id and code not in ("bad_request", "too_large"):
            self.problem(f"{kind}: {code} reply with id nil, but the frame's id {fid} is readable")

    def hello_ok(self) -> bool:
        s = self.server.dealer()
        try:
            s.send(msgpack.packb({"v": 1, "id": 7, "op": "hello"}))
            if not d2klive.wait_readable(s, self.server, REPLY_TIMEOUT_S):
                return False
            return d2klive.unpack(s.recv()).get("ok") is True
        finally:
            s.close()

    def huge_frame(self) -> None:
        """A frame over 16 x max_message_bytes: ZeroMQ cuts the connection, no reply; the server lives on."""
        s = self.server.dealer()
        size = 16 * self.max_msg + 1024
        req = {"v": 1, "id": self.fid(), "op": "hello", "pad": b"\x00" * size}
        s.send(msgpack.packb(req))
        self.counts["frames"] += 1
        self.counts["no_reply_expected"] += 1
        if s.poll(3000):
            self.problem(f"a frame of {size} bytes (over 16 x max_message_bytes) got a reply")
        s.close()
        if not self.hello_ok():
            self.problem("no hello reply after a frame over the transport cut-off")


class Victims:
    """Ordinary sessions on their own socket; every reply must be ok and logged."""

    def __init__(self, server: d2klive.LiveServer, n: int, rng: random.Random):
        self.server = server
        self.sock = server.dealer()
        self.rng = rng
        self.next_id = rng.randrange(1, 1 << 40)
        self.sessions: list[dict] = []  # open victims
        self.closed: list[dict] = []    # closed ones, their logs checked at the end
        self.problems: list[str] = []
        self.steps = 0
        for _ in range(n):
            self.open()

    def open(self) -> None:
        reply = self.call({"op": "reset", "task": "vector_add", "layer": 1, "options": {"max_steps": 1000}})
        if reply.get("ok"):
            self.sessions.append({"sid": reply["session"], "exchanges": [(reply["id"], reply)], "steps": 0})
        else:
            self.problems.append(f"victim reset failed: {reply}")

    def call(self, req: dict) -> dict:
        self.next_id += 1
        req = {"v": 1, "id": self.next_id, **req}
        self.sock.send(msgpack.packb(req))
        if not d2klive.wait_readable(self.sock, self.server, REPLY_TIMEOUT_S):
            self.problems.append(f"victim: no reply to {req['op']} id {req['id']}")
            return {}
        return d2klive.unpack(self.sock.recv())

    def step(self) -> None:
        v = self.rng.choice(self.sessions)
        if v["steps"] >= 200:  # well inside the step budget: close it, open another
            self.close_one(v)
            self.open()
            return
        if self.rng.random() < 0.5:
            req = {"op": "observe", "session": v["sid"]}
        else:
            req = {"op": "step", "session": v["sid"], "action": {
                "type": "write_file", "path": "victim.cuh", "content": f"// {self.rng.randrange(1 << 40)}\n"}}
        reply = self.call(req)
        if not reply:
            return
        self.steps += 1
        v["steps"] += req["op"] == "step"
        v["exchanges"].append((reply.get("id"), reply))
        last = (reply.get("observation") or {}).get("last") or {}
        if not reply.get("ok") or (req["op"] == "step" and last.get("ok") is not True):
            self.problems.append(f"victim {v['sid']}: {req['op']} failed: {str(reply)[:300]}")

    def close_one(self, v: dict) -> None:
        self.sessions.remove(v)
        self.closed.append(v)
        reply = self.call({"op": "close", "session": v["sid"]})
        v["exchanges"].append((reply.get("id"), reply))
        if not reply.get("ok"):
            self.problems.append(f"victim {v['sid']}: close failed: {reply}")

    def close(self) -> None:
        for v in list(self.sessions):
            self.close_one(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of fuzzing (default 60)")
    p.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: no limit)")
    p.add_argument("--sockets", type=int, default=4, help="fuzz DEALER sockets, one frame in flight each")
    p.add_argument("--victims", type=int, default=4, help="ordinary sessions that must stay intact")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-huge", action="store_true", help="skip the one frame over the 16x cut-off (~128 MiB)")
    p.add_argument("--bin", type=Path, default=d2klive.default_binary())
    p.add_argument("--tasks", type=Path, default=d2klive.default_tasks())
    p.add_argument("--keep", action="store_true", help="keep the state dir (logs) for inspection")
    a = p.parse_args()
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    if not a.bin.exists():
        print(f"protofuzz: no server binary at {a.bin} (build the d2k target or pass --bin)", file=sys.stderr)
        return 2
    print(f"protofuzz: seed {a.seed}, {a.duration:.0f} s, {a.sockets} sockets, {a.victims} victims", flush=True)
    # Few compiles per episode: a mutated compile must not turn the run into an nvcc benchmark.
    server = d2klive.LiveServer(a.bin, a.tasks, max_sessions=64, keep=a.keep,
                                extra=["--max-compiles", "2", "--max-evaluations", "1"])
    try:
        hello = server.wait_ready()
        fz = Fuzzer(a, server, hello)
        victims = Victims(server, a.victims, random.Random(a.seed + 1))
        t0 = time.monotonic()
        last_hello = t0
        huge_done = a.no_huge
        while time.monotonic() - t0 < a.duration and (not a.frames or fz.counts["frames"] < a.frames):
            if not server.alive():
                fz.problem(f"the server exited ({server.proc.returncode}) during fuzzing")
                break
            for s in fz.sockets:
                if s in fz.inflight:
                    continue
                if fz.to_close:
                    sid = fz.to_close.pop()
                    kind, parts = "close_fuzz_session", [msgpack.packb(
                        {"v": 1, "id": fz.fid(), "op": "close", "session": sid})]
                else:
                    kind, parts = fz.frame()
                fz.kinds[kind] = fz.kinds.get(kind, 0) + 1
                fz.counts["frames"] += 1
                s.send_multipart(parts)
                fz.inflight[s] = (time.monotonic(), parts, kind, b"")
            for s, _ in fz.poller.poll(100):
                got = s.recv_multipart()
                _, sent, kind, _ = fz.inflight.pop(s)
                fz.check_reply(got, sent, kind)
            now = time.monotonic()
            for s, (t, sent, kind, _) in list(fz.inflight.items()):
                if now - t > REPLY_TIMEOUT_S:
                    fz.problem(f"{kind}: no reply within {REPLY_TIMEOUT_S:.0f} s (frame {sent[-1][:200]!r})")
                    del fz.inflight[s]
            if victims.sessions:
                victims.step()
            if now - last_hello > 5:
                last_hello = now
                if not fz.hello_ok():
                    fz.problem("hello on a fresh socket got no reply (server hung?)")
            if not huge_done and now - t0 > a.duration / 2:
                huge_done = True
                fz.huge_frame()
        # Let the frames in flight land.
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while fz.inflight and time.monotonic() < deadline and server.alive():
            for s, _ in fz.poller.poll(100):
                got = s.recv_multipart()
                _, sent, kind, _ = fz.inflight.pop(s)
                fz.check_reply(got, sent, kind)
        for _, sent, kind, _ in fz.inflight.values():
            fz.problem(f"{kind}: no reply by the end (frame {sent[-1][:200]!r})")
        elapsed = time.monotonic() - t0
        victims.close()
        rc = server.stop(grace=120)
        if rc != 0:
            fz.problem(f"server exit status {rc} after SIGTERM")
        unreadable: list[str] = []
        logs = d2klive.logs_by_session(server.log_dir, unreadable)
        for msg in unreadable:
            fz.problem(f"unreadable episode log: {msg}")
        for v in victims.closed:
            for msg in d2klive.check_session_log(logs.get(v["sid"]), v["exchanges"], expect_end=True):
                victims.problems.append(f"victim {v['sid']}: {msg}")
        problems = fz.problems + victims.problems[:50]
        c = fz.counts
        print(f"protofuzz: {c['frames']} frames in {elapsed:.1f} s ({c['frames'] / max(elapsed, 1e-9):.0f}/s), "
              f"{c['replies']} replies ({c['ok']} ok), {c['no_reply_expected']} over the cut-off, "
              f"{c['sessions']} sessions opened by mutated resets")
        print(f"protofuzz: frame kinds {dict(sorted(fz.kinds.items()))}")
        print(f"protofuzz: error codes {dict(sorted(fz.codes.items()))}")
        print(f"protofuzz: {len(victims.closed)} victim sessions ({a.victims} at a time), {victims.steps} victim requests, "
              f"their logs checked")
        if problems:
            print(f"protofuzz: FAIL (seed {a.seed}), {len(problems)} problem(s):", file=sys.stderr)
            for m in problems:
                print("  " + m, file=sys.stderr)
            print("protofuzz: server log tail:\n" + server.tail(), file=sys.stderr)
            return 1
        print("protofuzz: PASS")
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(main())

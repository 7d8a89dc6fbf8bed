#!/usr/bin/env python3
"""Self-test of the log checker that soak.py and protofuzz.py rely on (d2klive.check_session_log):
a checker that passes everything would make both of them pass everything. Writes episode logs in
the documented format (docs/episode-log.md) and checks that a faithful one passes and that each kind
of damage is reported: a reply missing from the log, a logged reply that differs, an extra logged
exchange, a torn tail, a bad checksum, a missing end record, no log at all; and, after a SIGKILL,
only what a kill may leave is let through. Exit status 0 on success.
"""
from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))
import d2klive  # noqa: E402


def record(obj: dict, corrupt: bool = False) -> bytes:
    payload = msgpack.packb(obj)
    checksum = d2klive._xxh3(payload) if d2klive._xxh3 else 0
    if corrupt:
        checksum ^= 1
    return struct.pack("<IQ", len(payload), checksum) + payload


def write_log(path: Path, exchanges: list[tuple[int, dict]], end: bool = True, tail: bytes = b"",
              corrupt_index: int | None = None) -> None:
    data = bytearray(d2klive.LOG_MAGIC + struct.pack("<II", 1, 0))
    data += record({"k": "header", "session": "s1", "format": 1})
    for n, (rid, reply) in enumerate(exchanges):
        data += record({"k": "exchange", "n": n, "t_request": 1.0, "t_reply": 1.5,
                        "request": {"v": 1, "id": rid, "op": "step"}, "reply": reply},
                       corrupt=corrupt_index == n)
    if end:
        data += record({"k": "end", "reason": "closed"})
    data += tail
    path.write_bytes(bytes(data))


def main() -> int:
    received = [(10, {"v": 1, "id": 10, "ok": True, "session": "s1"}),
                (11, {"v": 1, "id": 11, "ok": True, "reward": 0.0, "observation": {"step": 1}}),
                (12, {"v": 1, "id": 12, "ok": False, "error": {"code": "busy"}})]
    failures = []
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s1.d2klog"

        def check(name: str, expect_problem: bool, killed: bool = False, in_flight: bool = False, **kw) -> None:
            write_log(p, kw.pop("logged", received), **kw)
            problems = d2klive.check_session_log(d2klive.read_episode_log(p), received, expect_end=not killed,
                                                 killed=killed, may_hold_one_more=in_flight)
            if bool(problems) != expect_problem:
                failures.append(f"{name}: expected {'a problem' if expect_problem else 'none'}, got {problems}")

        check("faithful log", False)
        check("a reply missing from the log", True, logged=received[:2])
        changed = [received[0], (11, {**received[1][1], "reward": 1.0}), received[2]]
        check("a logged reply that differs", True, logged=changed)
        check("an exchange the client never received", True, logged=received + [(13, {"v": 1, "id": 13})])
        check("reordered exchanges", True, logged=[received[0], received[2], received[1]])
        check("a torn tail", True, tail=b"\x05\x00\x00")
        if d2klive._xxh3:
            check("a bad checksum", True, corrupt_index=1)
        check("no end record", True, end=False)
        # After a SIGKILL (soak.py --kill-after): no end record and a torn tail are fine, and a session
        # with a request in flight may have one exchange more logged than received; nothing else.
        extra = received + [(13, {"v": 1, "id": 13, "ok": True})]
        check("killed: torn, no end", False, killed=True, end=False, tail=b"\x05\x00")
        check("killed: one more logged, in flight", False, killed=True, in_flight=True, end=False, logged=extra)
        check("killed: one more logged, none in flight", True, killed=True, end=False, logged=extra)
        check("killed: two more logged", True, killed=True, in_flight=True, end=False,
              logged=extra + [(14, {"v": 1, "id": 14})])
        check("killed: a received reply missing", True, killed=True, in_flight=True, end=False, logged=received[:2])
        # Format 2: an observe's reply logged as a JSON Patch of an earlier exchange's reply.
        obs = (12, {"v": 1, "id": 12, "ok": True, "observation": {"step": 1, "files": {"a/b": "x"}}})
        got = [received[0], received[1], obs]

        def write_compact(patch: list) -> None:
            data = bytearray(d2klive.LOG_MAGIC + struct.pack("<II", 2, 0))
            data += record({"k": "header", "session": "s1", "format": 2})
            for n, (rid, reply) in enumerate(got[:2]):
                data += record({"k": "exchange", "n": n, "t_request": 1.0, "t_reply": 1.5,
                                "request": {"v": 1, "id": rid, "op": "step"}, "reply": reply})
            data += record({"k": "exchange", "n": 2, "t_request": 2.0, "t_reply": 2.5,
                            "request": {"v": 1, "id": 12, "op": "observe"}, "reply_base": 1, "reply_patch": patch})
            data += record({"k": "end", "reason": "closed"})
            p.write_bytes(bytes(data))

        good_patch = [{"op": "remove", "path": "/reward"}, {"op": "replace", "path": "/id", "value": 12},
                      {"op": "add", "path": "/observation/files", "value": {"a/b": "x"}}]
        for name, patch, expect_problem in [("compact observe record", good_patch, False),
                                            ("compact record rebuilding another reply", good_patch[1:], True)]:
            write_compact(patch)
            problems = d2klive.check_session_log(d2klive.read_episode_log(p), got, expect_end=True, killed=False,
                                                 may_hold_one_more=False)
            if bool(problems) != expect_problem:
                failures.append(f"{name}: expected {'a problem' if expect_problem else 'none'}, got {problems}")
        if d2klive.apply_json_patch({"a": [1, 2, 3], "b/c": 1}, [{"op": "remove", "path": "/a/2"},
                                                                 {"op": "add", "path": "/a/0", "value": 0},
                                                                 {"op": "replace", "path": "/b~1c", "value": 2}]) \
                != {"a": [0, 1, 2], "b/c": 2}:
            failures.append("apply_json_patch: wrong result")
        by_session = d2klive.logs_by_session(Path(d))
        if "s1" not in by_session:
            failures.append("logs_by_session did not find the log by its header's session")
    if d2klive.check_session_log(None, received, expect_end=True) == []:
        failures.append("no log at all: no problem reported")
    for f in failures:
        print("checker_selftest: FAIL " + f, file=sys.stderr)
    if not failures:
        print(f"checker_selftest: PASS (checksums {'checked' if d2klive._xxh3 else 'not checked: no libxxhash'})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

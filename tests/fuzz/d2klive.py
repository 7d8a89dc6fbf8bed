"""Shared by the live soak (soak.py) and the live protocol fuzzer (protofuzz.py): start a real
`d2k serve` in a temporary state dir, talk to it over real ZeroMQ, read its episode logs back.

Nothing here imports the project's Python package: the episode log format is read from its
specification (docs/episode-log.md), so a writer bug cannot hide behind a shared reader.
"""
from __future__ import annotations

import copy
import ctypes
import ctypes.util
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import zmq

ROOT = Path(__file__).resolve().parents[2]

LOG_MAGIC = b"D2KEPLOG"
LOG_PREAMBLE = 16
RECORD_HEADER = 12  # u32le length + u64le XXH3-64


def _load_xxh3():
    """XXH3-64 from the system libxxhash (the server links the same library), or None."""
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash") or ""):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_64bits
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return lambda b: fn(b, len(b))
    return None


_xxh3 = _load_xxh3()


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


@dataclass
class EpisodeLog:
    path: Path
    header: dict
    exchanges: list[dict] = field(default_factory=list)
    end: dict | None = None
    torn: str | None = None        # why reading stopped early, None when the file read to its end
    checksums_checked: bool = False


def apply_json_patch(doc, patch: list):
    """RFC 6902 add/remove/replace (what the server writes) applied to a copy of doc."""
    doc = copy.deepcopy(doc)
    for op in patch:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        if not tokens:
            if op["op"] in ("add", "replace"):
                doc = copy.deepcopy(op["value"])
                continue
            raise ValueError(f"cannot {op['op']} the whole document")
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            i = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(i, copy.deepcopy(op["value"]))
            elif op["op"] == "remove":
                del parent[i]
            elif op["op"] == "replace":
                parent[i] = copy.deepcopy(op["value"])
            else:
                raise ValueError(f"patch op {op['op']}")
        else:
            if op["op"] in ("add", "replace"):
                parent[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del parent[last]
            else:
                raise ValueError(f"patch op {op['op']}")
    return doc


def read_episode_log(path: Path) -> EpisodeLog:
    """Every record of one episode log; damage is reported in .torn, never raised past the header."""
    data = path.read_bytes()
    if len(data) < LOG_PREAMBLE or data[:8] != LOG_MAGIC:
        raise ValueError(f"{path}: not an episode log (magic)")
    (version,) = struct.unpack_from("<I", data, 8)
    if version not in (1, 2):
        raise ValueError(f"{path}: format version {version}")
    records: list[dict] = []
    torn = None
    off = LOG_PREAMBLE
    while off < len(data):
        if off + RECORD_HEADER > len(data):
            torn = f"truncated record header at byte {off}"
            break
        length, checksum = struct.unpack_from("<IQ", data, off)
        payload = data[off + RECORD_HEADER: off + RECORD_HEADER + length]
        if len(payload) != length:
            torn = f"truncated payload at byte {off}"
            break
        if _xxh3 is not None and _xxh3(payload) != checksum:
            torn = f"checksum mismatch at byte {off}"
            break
        try:
            records.append(unpack(payload))
        except Exception as e:  # noqa: BLE001 - any undecodable payload is damage
            torn = f"undecodable payload at byte {off}: {e}"
            break
        off += RECORD_HEADER + length
    if not records or records[0].get("k") != "header":
        raise ValueError(f"{path}: no header record")
    log = EpisodeLog(path=path, header=records[0], torn=torn, checksums_checked=_xxh3 is not None)
    by_n: dict[int, dict] = {}
    for r in records[1:]:
        if r.get("k") == "exchange":
            if "reply_base" in r:  # format 2: an observe's reply as a patch of an earlier exchange's reply
                base = by_n.get(r["reply_base"])
                if base is None:
                    log.torn = f"exchange {r.get('n')}: reply_base {r['reply_base']} is no earlier exchange"
                    break
                r = dict(r)
                r["reply"] = apply_json_patch(base["reply"], r.pop("reply_patch"))
                del r["reply_base"]
            by_n[r.get("n")] = r
            log.exchanges.append(r)
        elif r.get("k") == "end":
            log.end = r
    return log


def logs_by_session(log_dir: Path, unreadable: list[str] | None = None) -> dict[str, EpisodeLog]:
    """Every log under log_dir, keyed by the session id its header names (not by file name). Logs
    that cannot be read (no magic, no header) are described in `unreadable` (raised when it is None)."""
    out: dict[str, EpisodeLog] = {}
    for p in sorted(log_dir.rglob("*.d2klog")):
        try:
            log = read_episode_log(p)
        except ValueError as e:
            if unreadable is None:
                raise
            unreadable.append(str(e))
            continue
        out[str(log.header.get("session"))] = log
    return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class LiveServer:
    """`d2k serve` on an ipc socket in a fresh state dir, recording episode logs."""

    def __init__(self, binary: Path, tasks: Path, max_sessions: int, extra: list[str] | None = None,
                 keep: bool = False):
        self.state = Path(tempfile.mkdtemp(prefix="d2k-live."))
        self.endpoint = f"ipc://{self.state}/d2k.sock"
        self.log_dir = self.state / "state" / "episodes"
        self.stderr_path = self.state / "server.log"
        self.keep = keep
        cmd = [str(binary), "serve", "--tasks", str(tasks), "--endpoint", self.endpoint,
               "--state-dir", str(self.state / "state"), "--events", "none",
               "--max-sessions", str(max_sessions), "--log-level", "warn"] + (extra or [])
        self.cmd = cmd
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr)
        self.ctx = zmq.Context()

    def wait_ready(self, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}) before answering: {self.tail()}")
            s = self.dealer()
            s.send(msgpack.packb({"v": 1, "id": 1, "op": "hello"}))
            if s.poll(500):
                reply = unpack(s.recv())
                s.close()
                return reply
            s.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer hello within {timeout} s")

    def dealer(self, identity: bytes | None = None) -> zmq.Socket:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        if identity:
            s.setsockopt(zmq.ROUTING_ID, identity)
        s.connect(self.endpoint)
        return s

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kib(self) -> int:
        return rss_kib(self.proc.pid)

    def stop(self, grace: float = 60.0) -> int | None:
        """SIGTERM, wait; the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def tail(self, n: int = 30) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def close(self) -> None:
        self.stop(5)
        self.ctx.destroy(linger=0)
        self._stderr.close()
        if not self.keep:
            shutil.rmtree(self.state, ignore_errors=True)


def wait_readable(sock: zmq.Socket, server: LiveServer, timeout: float) -> bool:
    """Whether `sock` has something to read within `timeout` s; gives up early once the server is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(250):
            return True
        if not server.alive():
            return False
    return False


def default_binary() -> Path:
    return Path(os.environ.get("D2K_BIN", ROOT / "build" / "bin" / "d2k"))


def default_tasks() -> Path:
    return Path(os.environ.get("D2K_TASKS_DIR", ROOT / "tasks"))


def check_session_log(log: EpisodeLog | None, sent: list[tuple[int, dict]], expect_end: bool,
                      killed: bool = False, may_hold_one_more: bool = False) -> list[str]:
    """Problems found comparing one session's log with what its client sent and received.

    killed: the server was SIGKILLed; a torn tail is then allowed (a record cut mid-write), and with
    may_hold_one_more (the session had a request in flight) the log may hold one exchange more than
    was received: logged before it was sent, the reply never left.

    `sent` is the session's exchanges in the order the client got the replies (one request in
    flight per session, so that is also the order the server sent them): (request id, decoded reply),
    retries of completed requests left out (the server answers those from its cache, unlogged).
    """
    if log is None:
        return ["no episode log"]
    problems = []
    if log.torn and not killed:
        problems.append(f"torn log: {log.torn}")
    got = [(int(x.get("request", {}).get("id", -1)), x.get("reply")) for x in log.exchanges]
    if may_hold_one_more and len(got) == len(sent) + 1:
        got = got[:-1]
    if len(got) != len(sent):
        problems.append(f"{len(sent)} replies received, {len(got)} exchanges logged")
    for i, ((sid, sreply), (lid, lreply)) in enumerate(zip(sent, got)):
        if sid != lid:
            problems.append(f"exchange {i}: request id {sid} received, {lid} logged")
            break
        if sreply != lreply:
            problems.append(f"exchange {i} (id {sid}): the logged reply differs from the one received")
            break
    ns = [x.get("n") for x in log.exchanges]
    if ns and ns[0] != 0:
        problems.append(f"first exchange has n={ns[0]}, not 0 (the reset)")
    if expect_end and log.end is None:
        problems.append("no end record")
    return problems

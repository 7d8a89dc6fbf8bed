"""A deliberately small client of protocol v1 for the conformance suite.

Raw ZeroMQ sockets and MessagePack maps, nothing else: no retries, no typed exceptions, no
normalisation. The tests look at exactly what arrives (the decoded map and its bytes), the way any
client would. Written from protocol/PROTOCOL.md alone; it imports nothing from the project.
"""
from __future__ import annotations

import secrets
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterable

import msgpack
import zmq

PROTOCOL_VERSION = 1

# PROTOCOL.md section 4: the fixed set of error codes of version 1 and whether each is retryable.
ERROR_CODES: dict[str, bool] = {
    "bad_request": False,
    "version_mismatch": False,
    "unknown_op": False,
    "unknown_session": False,
    "unknown_task": False,
    "invalid_action": False,
    "path_violation": False,
    "too_large": False,
    "busy": True,
    "capacity": True,
    "timeout": True,
    "sandbox_violation": False,
    "no_gpu": False,
    "episode_ended": False,
    "budget_exhausted": False,
    "shutting_down": True,
    "storage_unavailable": True,
    "internal": False,
}

# PROTOCOL.md section 8: the codes a failed action reports in observation.last.error. The table
# there adds `compile_error` to the section 4 codes it uses.
# Section 8's table: last.error.code of a failed action (section 4's codes plus the outcome names).
OUTCOME_CODES = {"path_violation", "invalid_action", "too_large", "budget_exhausted", "compile_error",
                 "timeout", "sandbox_violation", "incorrect", "runtime_error", "flagged", "internal"}

MAX_ERROR_MESSAGE_BYTES = 2048  # section 3

_missing = object()


class NoReply(AssertionError):
    """No reply within the deadline (an assertion: a conforming server answers every request)."""


@dataclass
class Reply:
    frames: list[bytes]  # every frame received, the payload last
    raw: bytes           # the payload frame
    body: dict[str, Any]

    @property
    def id(self) -> Any:
        return self.body.get("id")

    @property
    def ok(self) -> bool:
        return self.body.get("ok") is True

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)

    @property
    def error(self) -> dict[str, Any]:
        return self.body.get("error") or {}

    def __repr__(self) -> str:
        text = repr(self.body)
        return f"Reply({text[:600]}{'…' if len(text) > 600 else ''})"


def pack(value: Any) -> bytes:
    """MessagePack with str (never bin) for Python str, as section 14 asks of clients."""
    return msgpack.packb(value, use_bin_type=True)


def request_bytes(op: str | None, request_id: Any, *, v: Any = PROTOCOL_VERSION, **fields: Any) -> bytes:
    body: dict[str, Any] = {}
    if v is not _missing:
        body["v"] = v
    if request_id is not _missing:
        body["id"] = request_id
    if op is not None:
        body["op"] = op
    body.update(fields)
    return pack(body)


def decode(raw: bytes) -> dict[str, Any]:
    value = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    assert isinstance(value, dict), f"a reply must be a MessagePack map, got {type(value).__name__}"
    return value


class Conn:
    """One DEALER (or REQ) socket. Replies are matched by id; others are kept for later."""

    def __init__(self, endpoint: str, *, timeout: float = 300.0, routing_id: bytes | None = None,
                 socket_type: int = zmq.DEALER, context: zmq.Context | None = None) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.context = context or zmq.Context.instance()
        self.socket = self.context.socket(socket_type)
        self.socket.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            self.socket.setsockopt(zmq.ROUTING_ID, routing_id)
        self.socket.connect(endpoint)
        # Ids from a random start, as PROTOCOL.md section 6 advises (ids are per session).
        self._next_id = secrets.randbelow(1 << 40) + 1
        self._kept: list[Reply] = []

    def close(self) -> None:
        self.socket.close(linger=0)

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ------------------------------------------------------------------------------
    def fresh_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def send_raw(self, payload: bytes, prefix: Iterable[bytes] = ()) -> None:
        frames = [*prefix, payload]
        if len(frames) == 1:
            self.socket.send(payload)
        else:
            self.socket.send_multipart(frames)

    def send(self, op: str, *, id: Any = None, **fields: Any) -> int:
        """Sends one request; returns its id (a fresh one unless given)."""
        request_id = self.fresh_id() if id is None else id
        self.send_raw(request_bytes(op, request_id, **fields))
        return request_id

    # -- receiving ----------------------------------------------------------------------------
    def recv(self, timeout: float | None = None) -> Reply:
        """The next message from the server, whatever its id."""
        if self._kept:
            return self._kept.pop(0)
        return self._recv_socket(self.timeout if timeout is None else timeout)

    def _recv_socket(self, timeout: float) -> Reply:
        if not self.socket.poll(int(timeout * 1000), zmq.POLLIN):
            raise NoReply(f"no reply from {self.endpoint} within {timeout:.1f} s")
        frames = self.socket.recv_multipart()
        raw = frames[-1]
        return Reply(frames=frames, raw=raw, body=decode(raw))

    def wait(self, request_id: Any, timeout: float | None = None) -> Reply:
        """The reply whose id is `request_id` (None: the next reply with `id: nil`)."""
        for i, kept in enumerate(self._kept):
            if kept.id == request_id:
                return self._kept.pop(i)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoReply(f"no reply with id {request_id!r} from {self.endpoint}")
            reply = self._recv_socket(left)
            if reply.id == request_id:
                return reply
            self._kept.append(reply)

    def expect_silence(self, seconds: float) -> None:
        """Asserts that nothing arrives for `seconds` (e.g. no second reply to one request)."""
        assert not self._kept, f"unexpected reply: {self._kept[0]!r}"
        if self.socket.poll(int(seconds * 1000), zmq.POLLIN):
            frames = self.socket.recv_multipart()
            raise AssertionError(f"unexpected message from the server: {decode(frames[-1])!r}")

    # -- one exchange ---------------------------------------------------------------------------
    def call(self, op: str, *, timeout: float | None = None, **fields: Any) -> Reply:
        request_id = self.send(op, **fields)
        return self.wait(request_id, timeout)

    def call_raw(self, payload: bytes, *, expect_id: Any = None, timeout: float | None = None) -> Reply:
        self.send_raw(payload)
        return self.wait(expect_id, timeout)


# -- checks every test shares ------------------------------------------------------------------
def ok(reply: Reply) -> dict[str, Any]:
    """Asserts a success reply (section 3) and returns its map."""
    body = reply.body
    assert body.get("ok") is True, f"expected ok: true, got {reply!r}"
    assert body.get("v") == PROTOCOL_VERSION, f"reply v must be 1: {reply!r}"
    assert isinstance(body.get("id"), int) and body["id"] >= 1, f"reply id: {reply!r}"
    return body


def check_error_shape(reply: Reply) -> dict[str, Any]:
    """Section 3 (reply, error) and section 4 (codes, retryable): the shape of any error reply."""
    body = reply.body
    assert body.get("ok") is False, f"expected ok: false, got {reply!r}"
    assert body.get("v") == PROTOCOL_VERSION, f"reply v must be 1: {reply!r}"
    assert "id" in body and (body["id"] is None or isinstance(body["id"], int)), f"reply id: {reply!r}"
    error = body.get("error")
    assert isinstance(error, dict), f"error must be a map: {reply!r}"
    code = error.get("code")
    assert code in ERROR_CODES, f"error.code {code!r} is not in PROTOCOL.md section 4's table"
    assert isinstance(error.get("message"), str) and error["message"], f"error.message: {reply!r}"
    assert len(error["message"].encode()) <= MAX_ERROR_MESSAGE_BYTES, "error.message is over 2048 bytes"
    assert error.get("retryable") is ERROR_CODES[code], (
        f"error.retryable of {code} must be {ERROR_CODES[code]} (section 4), got {error.get('retryable')!r}")
    if "field" in error:
        assert isinstance(error["field"], str) and error["field"], f"error.field must be a str: {reply!r}"
    return error


def err(reply: Reply, code: str, *, field: Any = _missing, id: Any = _missing) -> dict[str, Any]:
    """Asserts an error reply with `code` (and `field`, and the reply's `id`, when given)."""
    error = check_error_shape(reply)
    assert error["code"] == code, f"expected error {code}, got {error['code']}: {error.get('message')!r}"
    if field is not _missing:
        assert error.get("field") == field, f"expected error.field {field!r}, got {error.get('field')!r}"
    if id is not _missing:
        assert reply.body["id"] == id, f"expected reply id {id!r}, got {reply.body['id']!r}"
    return error


# -- MessagePack types in a reply, read from its bytes ---------------------------------------------
class WireTypes:
    """What a reply's bytes contain: msgpack-python reads float32 and float64 alike, and bin as
    bytes, so section 2's reply column (float64 only, no bin, no ext, str keys) is read here."""

    def __init__(self) -> None:
        self.float32 = 0
        self.float64 = 0
        self.bins = 0
        self.exts = 0
        self.non_str_keys = 0


def wire_types(raw: bytes) -> WireTypes:
    found = WireTypes()
    pos = _walk(raw, 0, found, is_key=False)
    assert pos == len(raw), f"{len(raw) - pos} trailing bytes after the reply's value"
    return found


def _walk(b: bytes, pos: int, found: WireTypes, is_key: bool) -> int:
    t = b[pos]
    pos += 1
    is_str = False
    if t <= 0x7F or t >= 0xE0 or t in (0xC0, 0xC2, 0xC3):
        pass
    elif 0x80 <= t <= 0x8F:
        pos = _walk_map(b, pos, t & 0x0F, found)
    elif 0x90 <= t <= 0x9F:
        pos = _walk_array(b, pos, t & 0x0F, found)
    elif 0xA0 <= t <= 0xBF:
        pos += t & 0x1F
        is_str = True
    elif t in (0xD9, 0xDA, 0xDB):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4}[t]
        pos += width + int.from_bytes(b[pos:pos + width], "big")
        is_str = True
    elif t in (0xC4, 0xC5, 0xC6):
        width = {0xC4: 1, 0xC5: 2, 0xC6: 4}[t]
        pos += width + int.from_bytes(b[pos:pos + width], "big")
        found.bins += 1
    elif t in (0xC7, 0xC8, 0xC9):
        width = {0xC7: 1, 0xC8: 2, 0xC9: 4}[t]
        pos += width + 1 + int.from_bytes(b[pos:pos + width], "big")
        found.exts += 1
    elif t in (0xD4, 0xD5, 0xD6, 0xD7, 0xD8):
        pos += 1 + {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}[t]
        found.exts += 1
    elif t == 0xCA:
        pos += 4
        found.float32 += 1
    elif t == 0xCB:
        pos += 8
        found.float64 += 1
    elif t in (0xCC, 0xD0):
        pos += 1
    elif t in (0xCD, 0xD1):
        pos += 2
    elif t in (0xCE, 0xD2):
        pos += 4
    elif t in (0xCF, 0xD3):
        pos += 8
    elif t in (0xDC, 0xDD):
        width = 2 if t == 0xDC else 4
        count = int.from_bytes(b[pos:pos + width], "big")
        pos = _walk_array(b, pos + width, count, found)
    elif t in (0xDE, 0xDF):
        width = 2 if t == 0xDE else 4
        count = int.from_bytes(b[pos:pos + width], "big")
        pos = _walk_map(b, pos + width, count, found)
    else:
        raise AssertionError(f"invalid MessagePack type byte 0x{t:02x} in a reply")
    if is_key and not is_str:
        found.non_str_keys += 1
    return pos


def _walk_array(b: bytes, pos: int, count: int, found: WireTypes) -> int:
    for _ in range(count):
        pos = _walk(b, pos, found, is_key=False)
    return pos


def _walk_map(b: bytes, pos: int, count: int, found: WireTypes) -> int:
    for _ in range(count):
        pos = _walk(b, pos, found, is_key=True)
        pos = _walk(b, pos, found, is_key=False)
    return pos


def array32_header(count: int) -> bytes:
    return b"\xdd" + struct.pack(">I", count)


def str32_header(length: int) -> bytes:
    return b"\xdb" + struct.pack(">I", length)


MISSING = _missing

"""Encoding of protocol v1 frames: one MessagePack map per ZeroMQ frame."""
from __future__ import annotations

import os
import secrets
from typing import Any, Mapping

import msgpack

from .errors import D2KError, ProtocolError, TooLarge, error_from_reply

PROTOCOL_VERSION = 1
DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"

# Client-side deadline per op, in seconds: steps wait for compiles and GPU runs.
DEFAULT_TIMEOUTS: dict[str, float] = {
    "hello": 10.0,
    "list_tasks": 10.0,
    "stats": 10.0,
    "observe": 30.0,
    "close": 30.0,
    "reset": 60.0,
    "step": 900.0,
}

# Errors after which the same work is retried automatically, with a FRESH id: the server
# reports these before running anything, so asking again cannot run an action twice.
AUTO_RETRY_CODES = frozenset({"busy", "capacity"})

# Errors after which the very same request is resent with the SAME id until the deadline: the
# server may have run it and holds its reply until it can log it (its disk was full), so a fresh
# id could run the action twice.
SAME_ID_RETRY_CODES = frozenset({"storage_unavailable"})


# The request limits of protocol/PROTOCOL.md section 5 as `d2k serve` sets them by default; the
# live values come from hello.limits and replace these once known.
DEFAULT_LIMITS: dict[str, int] = {
    "max_message_bytes": 8 << 20,
    "max_string_bytes": 1 << 20,
    "max_file_bytes": 256 << 10,
}

# Requests up to this size are sent without asking the server for its limits first (every
# server's limits are far above it); a larger one is checked against hello.limits before it is
# sent, because a frame far over the limit is dropped by the server without a reply.
PRECHECK_BYTES = 64 << 10


def _longest_string(value: Any, path: str = "") -> tuple[int, str]:
    """(bytes, field path) of the longest string or bytes value in a request's fields."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")), path
    if isinstance(value, (bytes, bytearray)):
        return len(value), path
    best = (0, "")
    if isinstance(value, Mapping):
        for k, v in value.items():
            best = max(best, _longest_string(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            best = max(best, _longest_string(v, f"{path}[{i}]"))
    return best


def check_request_limits(op: str, fields: Mapping[str, Any], frame_bytes: int,
                         limits: Mapping[str, Any]) -> None:
    """Raises TooLarge, without sending anything, for a request over the server's limits."""
    max_message = int(limits.get("max_message_bytes", DEFAULT_LIMITS["max_message_bytes"]))
    if frame_bytes > max_message:
        raise TooLarge(f"the {op} request is {frame_bytes} bytes; the server takes at most "
                       f"{max_message} (hello.limits.max_message_bytes); nothing was sent")
    action = fields.get("action")
    if op == "step" and isinstance(action, Mapping) and action.get("type") in ("write_file", "edit"):
        max_file = int(limits.get("max_file_bytes", DEFAULT_LIMITS["max_file_bytes"]))
        for key in ("content", "old", "new"):
            text = action.get(key)
            if isinstance(text, str) and len(text.encode("utf-8", "surrogatepass")) > max_file:
                raise TooLarge(f"{key} is {len(text.encode('utf-8', 'surrogatepass'))} bytes; a workspace "
                               f"file holds at most {max_file} (hello.limits.max_file_bytes); nothing "
                               f"was sent", field=f"action.{key}")
    max_string = int(limits.get("max_string_bytes", DEFAULT_LIMITS["max_string_bytes"]))
    size, where = _longest_string(fields)
    if size > max_string:
        raise TooLarge(f"{where} is {size} bytes; one string may be at most {max_string} "
                       f"(hello.limits.max_string_bytes); nothing was sent", field=where)


def default_endpoint() -> str:
    return os.environ.get("D2K_ENDPOINT", DEFAULT_ENDPOINT)


class IdCounter:
    """Request ids: consecutive from a random start, so two clients never reuse an id on a
    shared session (the server caches replies by (session, id))."""

    def __init__(self, start: int | None = None) -> None:
        self._next = start if start is not None else secrets.randbelow(1 << 48) + 1

    def __call__(self) -> int:
        value = self._next
        self._next += 1
        return value


def encode_request(request_id: int, op: str, fields: Mapping[str, Any]) -> bytes:
    body = {"v": PROTOCOL_VERSION, "id": request_id, "op": op}
    body.update(fields)
    return msgpack.packb(body, use_bin_type=True)


def decode_reply(frame: bytes) -> dict[str, Any]:
    try:
        reply = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ProtocolError(f"undecodable reply frame: {exc}") from exc
    if not isinstance(reply, dict):
        raise ProtocolError(f"reply is not a map: {type(reply).__name__}")
    return reply


def check_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """Returns an ok reply, raises the typed error of an error reply."""
    if reply.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"reply has protocol version {reply.get('v')!r}, expected 1", reply=reply)
    if reply.get("ok") is True:
        return reply
    raise error_from_reply(reply)


def frame_of(msg: list[bytes]) -> bytes:
    """The payload of a DEALER message ([payload], or ["", payload] when the peer added one)."""
    if not msg:
        raise ProtocolError("empty message")
    return msg[-1]


def is_auto_retry(err: D2KError) -> bool:
    return err.code in AUTO_RETRY_CODES


def is_same_id_retry(reply: Mapping[str, Any]) -> bool:
    """True for an error reply whose request must be resent unchanged, with the same id."""
    err = reply.get("error")
    return reply.get("ok") is False and isinstance(err, Mapping) and err.get("code") in SAME_ID_RETRY_CODES

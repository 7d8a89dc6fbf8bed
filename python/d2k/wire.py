"""Encoding of protocol v1 frames: one MessagePack map per ZeroMQ frame."""
from __future__ import annotations

import os
import secrets
from typing import Any, Mapping

import msgpack

from .errors import D2KError, ProtocolError, error_from_reply

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

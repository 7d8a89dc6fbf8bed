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


# --- CURVE (authenticated, encrypted transport; protocol/curve.hpp is the C++ twin) ---------

def _is_z85_key(text: str) -> bool:
    if len(text) != 40:
        return False
    try:
        import zmq.utils.z85
        return len(zmq.utils.z85.decode(text)) == 32
    except Exception:  # noqa: BLE001 - anything undecodable is not a key
        return False


def _key_lines(path: str) -> list[str]:
    with open(path, encoding="ascii") as f:
        # "# " starts a comment; '#' alone is a Z85 character (a key may start with it).
        return [t for t in (line.strip() for line in f)
                if t and not (t[0] == "#" and (len(t) == 1 or t[1] in " \t"))]


def read_public_key(file_or_key: str) -> str:
    """The public key of a .pub file (``d2k keys``), of a .key file, or the 40-character key."""
    if _is_z85_key(file_or_key) and not os.path.exists(file_or_key):
        return file_or_key
    for t in _key_lines(file_or_key):
        if t.startswith("secret"):
            continue
        if t.startswith("public"):
            t = t[6:].strip()
        key = t.split()[0]
        if _is_z85_key(key):
            return key
        raise ValueError(f"{file_or_key}: not a CURVE public key (40 characters of Z85)")
    raise ValueError(f"{file_or_key}: no public key in it")


def read_key_pair(path: str) -> tuple[str, str]:
    """(public, secret) of a .key file that ``d2k keys`` wrote."""
    import zmq
    pair = {}
    for t in _key_lines(path):
        word, _, value = t.partition(" ")
        if word not in ("public", "secret") or not _is_z85_key(value.strip()):
            raise ValueError(f"{path}: expected 'public <Z85>' and 'secret <Z85>' lines (a file `d2k keys` wrote)")
        pair[word] = value.strip()
    if "secret" not in pair:
        raise ValueError(f"{path}: no 'secret' line (is it a .pub file?)")
    public = zmq.curve_public(pair["secret"].encode()).decode()
    if pair.get("public", public) != public:
        raise ValueError(f"{path}: its public key does not belong to its secret key")
    return public, pair["secret"]


def curve_keys(server_key: str | None = None,
               client_key: str | None = None) -> tuple[str, str, str] | None:
    """(server public, client public, client secret), from the arguments or else from
    D2K_SERVER_KEY / D2K_CLIENT_KEY; None when neither names a server key (plain ZeroMQ)."""
    server_key = server_key or os.environ.get("D2K_SERVER_KEY") or None
    client_key = client_key or os.environ.get("D2K_CLIENT_KEY") or None
    if server_key is None and client_key is None:
        return None
    if server_key is None or client_key is None:
        raise ValueError("CURVE needs both the server's public key (server_key= or D2K_SERVER_KEY, "
                         "its .pub file) and this client's key pair (client_key= or D2K_CLIENT_KEY, "
                         "a .key file from `d2k keys client`)")
    public, secret = read_key_pair(client_key)
    return read_public_key(server_key), public, secret


def make_curve_client(socket: Any, keys: tuple[str, str, str] | None) -> None:
    """Makes a ZeroMQ socket a CURVE client with ``keys`` (see curve_keys); before connect."""
    if keys is None:
        return
    import zmq
    server, public, secret = keys
    socket.setsockopt(zmq.CURVE_SERVERKEY, server.encode())
    socket.setsockopt(zmq.CURVE_PUBLICKEY, public.encode())
    socket.setsockopt(zmq.CURVE_SECRETKEY, secret.encode())

"""PROTOCOL.md sections 1 (transport), 2 (encoding), 3 (envelope) and 12 (versioning)."""
from __future__ import annotations

import msgpack
import pytest
import zmq

from wireclient import MISSING, Conn, err, ok, pack, request_bytes, wire_types


# -- section 1: transport ----------------------------------------------------------------------
def test_dealer_pipelined_requests_are_matched_by_id(conn: Conn) -> None:
    """§1: a DEALER may pipeline requests; every reply carries its request's id."""
    ids = {conn.send("hello"): "hello", conn.send("list_tasks"): "list_tasks", conn.send("stats"): "stats"}
    seen = {}
    for _ in ids:
        reply = conn.recv()
        assert reply.id in ids, f"a reply to no request of ours: {reply!r}"
        seen[reply.id] = ok(reply)
    assert set(seen) == set(ids)
    conn.expect_silence(0.3)  # §1: nothing is sent that is not a reply to a request


def test_dealer_receives_one_payload_frame(conn: Conn) -> None:
    """§1: DEALER sends [payload] and receives [payload]."""
    reply = conn.call("hello")
    ok(reply)
    assert len(reply.frames) == 1


def test_frames_before_the_payload_come_back_in_front_of_the_reply(conn: Conn) -> None:
    """§1: the last frame is the payload; every frame before it is sent back before the reply."""
    request_id = conn.fresh_id()
    conn.send_raw(request_bytes("hello", request_id), prefix=[b"", b"trace-7"])
    reply = conn.wait(request_id)
    ok(reply)
    assert reply.frames[:-1] == [b"", b"trace-7"]


def test_req_socket_works(endpoint: str, request_timeout: float) -> None:
    """§1: a REQ socket (libzmq adds the empty delimiter) gets [payload] back."""
    with Conn(endpoint, timeout=request_timeout, socket_type=zmq.REQ) as c:
        reply = c.call("hello")
        body = ok(reply)
        assert body["server"]
        assert len(reply.frames) == 1


# -- section 2: encoding -------------------------------------------------------------------------
def _raw_error(conn: Conn, payload: bytes, code: str, *, reply_id=None):
    return err(conn.call_raw(payload, expect_id=reply_id), code, id=reply_id)


@pytest.mark.parametrize("payload, why", [
    (b"\x81\xa1\x76", "a truncated map (section 13's example)"),
    (b"\xc1", "the invalid type byte 0xc1"),
    (b"", "an empty frame"),
    (pack({"v": 1, "id": 5, "op": "hello"}) + b"\x00", "trailing bytes after the value"),
    (b"\x82\xa1v\x01\xa2id\xd9", "a str8 whose length byte is missing"),
])
def test_undecodable_payloads_are_bad_request_with_nil_id(conn: Conn, payload: bytes, why: str) -> None:
    """§2, §3: undecodable payloads get bad_request with id nil (the id could not be read)."""
    _raw_error(conn, payload, "bad_request")


@pytest.mark.parametrize("value", [[1, 2, 3], "hello", 7, None])
def test_top_level_must_be_a_map(conn: Conn, value) -> None:
    """§2: the payload must be a map at the top level, else bad_request (id nil)."""
    _raw_error(conn, pack(value), "bad_request")


def test_ext_types_are_bad_request(conn: Conn) -> None:
    """§2: ext (any) is refused with bad_request."""
    payload = pack({"v": 1, "id": 9, "op": "hello", "x": msgpack.ExtType(5, b"abc")})
    conn.send_raw(payload)
    reply = conn.recv()
    err(reply, "bad_request")
    assert reply.id in (None, 9)


def test_non_string_map_keys_are_bad_request(conn: Conn) -> None:
    """§2: map keys must be str."""
    payload = b"\x84" + pack("v") + b"\x01" + pack("id") + b"\x0b" + pack("op") + pack("hello") + b"\x05\x06"
    conn.send_raw(payload)
    err(conn.recv(), "bad_request")


def test_duplicate_map_keys_are_bad_request(conn: Conn) -> None:
    """§2: keys must be unique within a map."""
    payload = b"\x84" + pack("v") + b"\x01" + pack("id") + b"\x0c" + pack("op") + pack("hello") + pack("op") + pack("stats")
    conn.send_raw(payload)
    err(conn.recv(), "bad_request")


def test_invalid_utf8_in_a_string_is_bad_request(conn: Conn) -> None:
    """§2: str must be valid UTF-8."""
    payload = b"\x84" + pack("v") + b"\x01" + pack("id") + b"\x0d" + pack("op") + pack("hello") + pack("client") + b"\xa2\xff\xfe"
    conn.send_raw(payload)
    err(conn.recv(), "bad_request")


def test_bin_is_read_like_str(conn: Conn, task_id: str) -> None:
    """§2: bin is accepted and treated exactly like a str (op, client and reset's task sent as bin)."""
    request_id = conn.fresh_id()
    conn.send_raw(msgpack.packb({"v": 1, "id": request_id, "op": b"hello", "client": b"conformance"},
                                use_bin_type=True))
    reply = conn.recv()
    assert ok(reply)["id"] == request_id
    request_id = conn.fresh_id()
    conn.send_raw(msgpack.packb({"v": 1, "id": request_id, "op": b"reset", "task": task_id.encode(), "layer": 0},
                                use_bin_type=True))
    reply = conn.recv()
    body = ok(reply)
    assert body["id"] == request_id and body["observation"]["task"]["id"] == task_id
    conn.call("close", session=body["session"])


def test_bin_map_key_is_bad_request(conn: Conn) -> None:
    """§2: map keys must be str; a bin key (b"op") is refused with bad_request."""
    request_id = conn.fresh_id()
    conn.send_raw(msgpack.packb({"v": 1, "id": request_id, b"op": "hello"}, use_bin_type=True))
    err(conn.recv(), "bad_request")


def test_invalid_utf8_in_bin_is_bad_request(conn: Conn) -> None:
    """§2: a bin must be UTF-8 too."""
    request_id = conn.fresh_id()
    conn.send_raw(msgpack.packb({"v": 1, "id": request_id, "op": "hello", "client": b"\xff\xfe"},
                                use_bin_type=True))
    reply = conn.recv()
    err(reply, "bad_request")


def test_unknown_fields_are_ignored_at_every_level(conn: Conn, open_episode) -> None:
    """§2: unknown fields are ignored in the envelope, op fields, options and action."""
    body = ok(conn.call("hello", trace_id="abc", extra={"nested": [1, 2]}))
    assert "trace_id" not in body and "extra" not in body, "unknown fields are not echoed"
    ep = open_episode(options={"max_steps": 5, "my_own": True}, client_field=1)
    body = ep.ok_step({"type": "write_file", "path": "extra.cuh", "content": "// x\n", "colour": "blue"})
    assert body["observation"]["last"]["ok"] is True
    assert body["observation"]["files"]["extra.cuh"] == "// x\n"


def test_optional_fields_may_be_nil(conn: Conn, task_id: str) -> None:
    """§2 conventions: an optional field sent as nil means "not given"."""
    reply = conn.call("reset", task=task_id, layer=0, seed=None, options={"max_steps": None, "label": None})
    body = ok(reply)
    conn.call("close", session=body["session"])
    assert ok(conn.call("hello", client=None))


def test_integer_fields_refuse_floats(conn: Conn, task_id: str) -> None:
    """§2: an integer field does not accept a float, even 1.0 (layer)."""
    err(conn.call("reset", task=task_id, layer=1.0), "bad_request", field="layer")


def test_float_fields_accept_integers(conn: Conn, task_id: str) -> None:
    """§2: a float field (options.wall_seconds) accepts integers."""
    body = ok(conn.call("reset", task=task_id, layer=0, options={"wall_seconds": 600}))
    conn.call("close", session=body["session"])
    assert body["observation"]["budget"]["wall_seconds"] > 0


def test_float32_is_read_as_a_double(conn: Conn, task_id: str) -> None:
    """§2: float32 and float64 are accepted in requests (options.wall_seconds as float32)."""
    request_id = conn.fresh_id()
    payload = msgpack.packb({"v": 1, "id": request_id, "op": "reset", "task": task_id, "layer": 0,
                             "options": {"wall_seconds": 250.5}}, use_bin_type=True, use_single_float=True)
    assert b"\xca" in payload
    body = ok(conn.call_raw(payload, expect_id=request_id))
    conn.call("close", session=body["session"])
    assert body["observation"]["budget"]["wall_seconds"] == 250.5


def test_integers_of_any_width(conn: Conn, task_id: str) -> None:
    """§2: a positive int in any width is accepted (id as uint64, layer as uint32, seed as int64)."""
    request_id = conn.fresh_id()
    payload = (b"\x86" + pack("v") + b"\xcc\x01" + pack("id") + b"\xcf" + request_id.to_bytes(8, "big")
               + pack("op") + pack("reset") + pack("task") + pack(task_id)
               + pack("layer") + b"\xce\x00\x00\x00\x02" + pack("seed") + b"\xd3" + (7).to_bytes(8, "big"))
    body = ok(conn.call_raw(payload, expect_id=request_id))
    conn.call("close", session=body["session"])
    assert body["observation"]["layer"] == 2


def test_reply_bytes_use_float64_str_keys_and_no_bin_or_ext(conn: Conn, open_episode) -> None:
    """§2 (replies): floats always float64 (0.0 too), map keys str, never bin or ext."""
    ep = open_episode()
    step = ep.step({"type": "write_file", "path": "a.cuh", "content": "// a\n"})
    ok(step)
    assert isinstance(step["reward"], float) and step["reward"] == 0.0
    for reply in (ep.reset_reply, step, conn.call("hello"), conn.call("stats"), conn.call("list_tasks")):
        found = wire_types(reply.raw)
        assert found.float32 == 0, "a float32 in a reply (section 2: always float64)"
        assert found.bins == 0 and found.exts == 0
        assert found.non_str_keys == 0
    # reward 0.0 is on the wire as float64 (0xcb), not as the int 0
    assert wire_types(step.raw).float64 >= 1


# -- section 3: envelope --------------------------------------------------------------------------
def test_success_reply_envelope(conn: Conn) -> None:
    """§3: a success reply has v 1, the request's id and ok true."""
    request_id = conn.send("hello")
    body = ok(conn.wait(request_id))
    assert body["id"] == request_id and body["v"] == 1 and body["ok"] is True


def test_missing_id_is_bad_request_with_nil_id(conn: Conn) -> None:
    """§3: id must be present: bad_request, field id, reply id nil."""
    err(conn.call_raw(request_bytes("hello", MISSING)), "bad_request", field="id", id=None)


@pytest.mark.parametrize("bad_id", ["7", 1.0, -3, [1]])
def test_mistyped_id_is_bad_request_with_nil_id(conn: Conn, bad_id) -> None:
    """§3: id must be an unsigned integer: bad_request, field id, reply id nil."""
    err(conn.call_raw(request_bytes("hello", bad_id)), "bad_request", field="id", id=None)


def test_id_zero_is_bad_request(conn: Conn) -> None:
    """§3: id must be >= 1. (The reply's id: nil or 0; the spec only names mistyped ids.)"""
    conn.send_raw(request_bytes("hello", 0))
    reply = conn.recv()
    err(reply, "bad_request", field="id")
    assert reply.id in (None, 0)


def test_missing_version_is_version_mismatch(conn: Conn) -> None:
    """§3, §12: v missing → version_mismatch, field v, with the request's id."""
    err(conn.call_raw(request_bytes("hello", 77, v=MISSING), expect_id=77), "version_mismatch", field="v", id=77)


@pytest.mark.parametrize("version", [2, 0, "1", 1.0])
def test_other_versions_are_version_mismatch(conn: Conn, version) -> None:
    """§3, §12: any v other than 1 → version_mismatch; the message names the versions spoken."""
    error = err(conn.call_raw(request_bytes("hello", 78, v=version), expect_id=78), "version_mismatch",
                field="v", id=78)
    assert "1" in error["message"]


def test_envelope_is_checked_in_order(conn: Conn) -> None:
    """§3: id is checked before v, and v before op."""
    err(conn.call_raw(request_bytes("nonsense", MISSING, v=9)), "bad_request", field="id", id=None)
    err(conn.call_raw(request_bytes("nonsense", 79, v=9), expect_id=79), "version_mismatch", field="v")
    err(conn.call_raw(request_bytes(None, 80, v=1), expect_id=80), "bad_request", field="op")


def test_op_must_be_a_string(conn: Conn) -> None:
    """§3: op must be a string: bad_request, field op."""
    request_id = conn.fresh_id()
    err(conn.call_raw(pack({"v": 1, "id": request_id, "op": 3}), expect_id=request_id), "bad_request", field="op")


@pytest.mark.parametrize("op", ["dance", "Hello", "reset2", ""])
def test_unknown_op(conn: Conn, op: str) -> None:
    """§3, §4: an op that is not one of version 1's → unknown_op, field op."""
    err(conn.call(op), "unknown_op", field="op")


# -- section 12: versioning ---------------------------------------------------------------------------
def test_hello_lists_version_1(hello) -> None:
    """§12: hello.protocol lists the versions spoken; version 1 among them."""
    assert 1 in hello["protocol"]
    assert all(isinstance(v, int) and v >= 1 for v in hello["protocol"])

"""Client-side pieces that need no server: error mapping, actions, observation encoding."""
from __future__ import annotations

import json

import msgpack
import pytest
import zmq

import d2k
from d2k import spaces, wire

ALL_CODES = {
    "bad_request": (d2k.BadRequest, False), "version_mismatch": (d2k.VersionMismatch, False),
    "unknown_op": (d2k.UnknownOp, False), "unknown_session": (d2k.UnknownSession, False),
    "unknown_task": (d2k.UnknownTask, False), "invalid_action": (d2k.InvalidAction, False),
    "path_violation": (d2k.PathViolation, False), "too_large": (d2k.TooLarge, False),
    "busy": (d2k.Busy, True), "capacity": (d2k.Capacity, True), "timeout": (d2k.Timeout, True),
    "sandbox_violation": (d2k.SandboxViolation, False), "no_gpu": (d2k.NoGpu, False),
    "episode_ended": (d2k.EpisodeEnded, False), "budget_exhausted": (d2k.BudgetExhausted, False),
    "shutting_down": (d2k.ShuttingDown, True), "internal": (d2k.Internal, False),
    "storage_unavailable": (d2k.StorageUnavailable, True),
}


@pytest.mark.parametrize("code", sorted(ALL_CODES))
def test_every_protocol_code_maps_to_its_class(code):
    cls, retryable = ALL_CODES[code]
    reply = {"v": 1, "id": 7, "ok": False,
             "error": {"code": code, "message": "m", "retryable": retryable, "field": "action.path"}}
    err = d2k.error_from_reply(reply)
    assert type(err) is cls and isinstance(err, d2k.D2KError)
    assert err.code == code and err.retryable is retryable and err.field == "action.path"
    assert err.reply is reply and "action.path" in str(err)
    with pytest.raises(cls):
        wire.check_reply(reply)


def test_unknown_code_keeps_code_and_server_retryable():
    err = d2k.error_from_reply({"v": 1, "id": 1, "ok": False,
                                "error": {"code": "brand_new", "message": "x", "retryable": True}})
    assert type(err) is d2k.D2KError and err.code == "brand_new" and err.retryable


def test_malformed_replies_are_protocol_errors():
    with pytest.raises(d2k.ProtocolError):
        wire.check_reply({"v": 2, "id": 1, "ok": True})
    with pytest.raises(d2k.ProtocolError):
        wire.decode_reply(b"\xc1")  # never-used msgpack byte
    with pytest.raises(d2k.ProtocolError):
        wire.decode_reply(msgpack.packb([1, 2]))
    assert isinstance(d2k.error_from_reply({"v": 1, "ok": False}), d2k.ProtocolError)


def test_client_timeout_is_a_retryable_timeout():
    assert issubclass(d2k.ClientTimeout, d2k.Timeout)
    assert d2k.ClientTimeout("x").retryable


def test_request_encoding_and_ids():
    ids = wire.IdCounter(start=5)
    assert [ids(), ids()] == [5, 6]
    assert wire.IdCounter()() >= 1
    frame = wire.encode_request(9, "step", {"session": "s", "action": {"type": "compile"}})
    assert msgpack.unpackb(frame) == {"v": 1, "id": 9, "op": "step", "session": "s",
                                      "action": {"type": "compile"}}


def test_normalize_action_forms():
    assert d2k.normalize_action({"type": "compile", "path": "x"}) == {"type": "compile"}
    assert d2k.normalize_action('{"type":"edit","path":"a.cu","old":"x","new":"y"}') == \
        d2k.actions.edit("a.cu", "x", "y")
    sample = {"type": 0, "path": "k.cu", "content": "c", "old": "o", "new": "n", "diff": "d"}
    assert d2k.normalize_action(sample) == d2k.actions.write_file("k.cu", "c")
    assert d2k.normalize_action({"type": "frobnicate", "x": 1}) == {"type": "frobnicate", "x": 1}
    for bad in ("not json", 3, {"type": 17}, {"type": None}, ["compile"]):
        with pytest.raises(d2k.InvalidAction):
            d2k.normalize_action(bad)


def test_observation_encoding_is_printable_deterministic_and_in_space():
    raw = {"task": {"id": "t", "statement": "é\nü"}, "layer": 1,
           "guidance": [{"layer": 1, "title": "T", "text": "x"}],
           "files": {"kernel.cu": "int main(){}\n// ünïcode\t"},
           "last": {"action": "compile", "ok": True,
                    "compile": {"ok": True, "cached": False, "seconds": 2.5, "log": ""}},
           "budget": {"steps_used": 1, "seconds_used": 3.2, "max_steps": 50},
           "step": 1, "done": False, "end_reason": None}
    obs = spaces.encode_observation(raw)
    assert obs in spaces.observation_space()
    later = dict(raw, last={**raw["last"], "compile": {**raw["last"]["compile"], "cached": True,
                                                        "seconds": 0.01}},
                 budget={**raw["budget"], "seconds_used": 9.0})
    assert spaces.encode_observation(later) == obs
    parsed = d2k.parse_observation(obs)
    assert parsed["files"]["kernel.cu"].endswith("ünïcode\t")
    assert parsed["status"]["budget"] == {"steps_used": 1, "max_steps": 50}
    assert "seconds" not in parsed["last"]["compile"]
    assert json.loads(obs["last"])["action"] == "compile"


def test_action_space_samples_normalize_to_wire_actions():
    space = spaces.action_space()
    space.seed(0)
    for _ in range(12):
        wire_action = d2k.normalize_action(space.sample())
        assert wire_action["type"] in d2k.ACTION_TYPES
        assert set(wire_action) == {"type", *d2k.actions.ACTION_FIELDS[wire_action["type"]]}


def test_client_times_out_against_a_silent_peer():
    # A ROUTER that never answers: the client resends the same id, then gives up.
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    policy = d2k.RetryPolicy(resend_after=0.1)
    try:
        with d2k.Client(f"tcp://127.0.0.1:{port}", timeout=0.45, policy=policy) as client:
            with pytest.raises(d2k.ClientTimeout):
                client.hello()
        seen = []
        while router.poll(0):
            seen.append(msgpack.unpackb(router.recv_multipart()[-1]))
        assert len(seen) >= 2, "the request should have been resent"
        assert len({m["id"] for m in seen}) == 1, "a resend must reuse the request id"
    finally:
        router.close()
        ctx.term()

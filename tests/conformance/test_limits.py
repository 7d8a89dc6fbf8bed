"""PROTOCOL.md section 5 (limits, read live from hello.limits) and section 1 (ZMQ_MAXMSGSIZE)."""
from __future__ import annotations

from typing import Any

import pytest

from conftest import Episode
from wireclient import Conn, array32_header, err, ok, pack, request_bytes, str32_header
from test_actions import outcome_failure

MIB = 1 << 20


def nested(depth: int) -> Any:
    """A value that is `depth` arrays deep."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


# -- limits found while decoding ---------------------------------------------------------------------------
def test_message_over_max_message_bytes_is_too_large_with_its_id(conn: Conn, limits) -> None:
    """§5, §1: a frame over max_message_bytes (and under 16x) → too_large before decoding, with the
    request's id when the top-level map's id can be read without decoding the rest."""
    size = limits["max_message_bytes"] + 1
    head = request_bytes("hello", 5)  # a valid start; the padding after it makes the frame too long
    payload = head + b"\x00" * (size - len(head))
    err(conn.call_raw(payload, expect_id=5), "too_large", id=5)


def test_message_over_max_message_bytes_without_a_readable_id_has_nil_id(conn: Conn, limits) -> None:
    """§5: too_large with id nil when the frame's id cannot be read (here: not a map)."""
    size = limits["max_message_bytes"] + 1
    err(conn.call_raw(b"\x91" + b"\x00" * (size - 1), expect_id=None), "too_large", id=None)


def test_frame_over_sixteen_times_the_limit_gets_no_reply(conn: Conn, connect, limits) -> None:
    """§1: a frame over 16 x max_message_bytes is dropped with the connection, without a reply;
    the server carries on serving others."""
    size = 16 * limits["max_message_bytes"] + 1
    if size > 256 * MIB:
        pytest.skip("max_message_bytes is too large to send 16x of it")
    conn.send_raw(b"\x80" + b"\x00" * (size - 1))
    conn.expect_silence(2.0)
    assert ok(connect().call("hello"))["server"]


def test_depth_at_the_limit_is_accepted_and_over_it_is_too_large(conn: Conn, limits) -> None:
    """§5: nesting up to max_depth (the top-level map counts as 1) is fine; one more is too_large."""
    depth = limits["max_depth"]
    assert ok(conn.call("hello", deep=nested(depth - 1)))  # map + (depth-1) arrays = depth levels
    request_id = conn.fresh_id()  # §5: a limit found while decoding answers with the id it can read
    reply = conn.call_raw(request_bytes("hello", request_id, deep=nested(depth)), expect_id=request_id)
    err(reply, "too_large", id=request_id)


def test_string_at_the_limit_is_accepted_and_over_it_is_too_large(conn: Conn, limits) -> None:
    """§5: one string of max_string_bytes is fine; one byte more is too_large."""
    n = limits["max_string_bytes"]
    if n + 1024 > limits["max_message_bytes"]:
        pytest.skip("max_string_bytes does not fit in a message")
    assert ok(conn.call("hello", pad="x" * n))
    conn.send_raw(request_bytes("hello", conn.fresh_id(), pad="x" * (n + 1)))
    err(conn.recv(), "too_large")


def test_map_key_counts_as_a_string(conn: Conn, limits) -> None:
    """§5: max_string_bytes includes map keys."""
    n = limits["max_string_bytes"]
    if n + 1024 > limits["max_message_bytes"]:
        pytest.skip("max_string_bytes does not fit in a message")
    conn.send_raw(pack({"v": 1, "id": conn.fresh_id(), "op": "hello", "k" * (n + 1): 1}))
    err(conn.recv(), "too_large")


def test_declared_huge_string_without_data(conn: Conn) -> None:
    """§2, §5: a str32 declaring 4 GiB with no bytes behind it is refused (too_large or bad_request),
    without the server allocating for it (it keeps answering)."""
    payload = b"\x84" + pack("v") + b"\x01" + pack("id") + b"\x05" + pack("op") + pack("hello") + pack("x") \
        + str32_header(0xFFFFFFFF)
    conn.send_raw(payload)
    reply = conn.recv()
    assert reply.error.get("code") in ("too_large", "bad_request"), reply
    err(reply, reply.error["code"])
    assert ok(conn.call("hello"))


def test_array_items_limit(conn: Conn, limits) -> None:
    """§5: an array of max_array_items is fine; one more item is too_large."""
    n = limits["max_array_items"]
    assert ok(conn.call("hello", items=[None] * n))
    conn.send_raw(request_bytes("hello", conn.fresh_id(), items=[None] * (n + 1)))
    err(conn.recv(), "too_large")


def test_declared_huge_array_without_data(conn: Conn) -> None:
    """§5: an array32 declaring 2^32-1 items (with no data) is too_large (counts are as declared)."""
    payload = b"\x84" + pack("v") + b"\x01" + pack("id") + b"\x05" + pack("op") + pack("hello") + pack("x") \
        + array32_header(0xFFFFFFFF)
    conn.send_raw(payload)
    err(conn.recv(), "too_large")
    assert ok(conn.call("hello"))


def test_map_entries_limit(conn: Conn, limits) -> None:
    """§5: a map of max_map_entries is fine; one more entry is too_large."""
    n = limits["max_map_entries"]
    assert ok(conn.call("hello", entries={f"k{i}": None for i in range(n)}))
    conn.send_raw(request_bytes("hello", conn.fresh_id(), entries={f"k{i}": None for i in range(n + 1)}))
    err(conn.recv(), "too_large")


def test_total_items_limit(conn: Conn, limits) -> None:
    """§5: array items plus map entries in the whole message over max_total_items → too_large."""
    per = limits["max_array_items"]
    arrays = limits["max_total_items"] // per + 1
    if arrays > limits["max_array_items"]:
        pytest.skip("max_total_items cannot be reached within max_array_items")
    payload = request_bytes("hello", conn.fresh_id(), items=[[None] * per for _ in range(arrays)])
    if len(payload) > limits["max_message_bytes"]:
        pytest.skip("max_total_items cannot be reached within max_message_bytes")
    conn.send_raw(payload)
    err(conn.recv(), "too_large")


# -- limits checked after decoding (they carry the request's id and name the field) -------------------------------------
def test_label_limit(conn: Conn, task_id: str, limits) -> None:
    """§5, §7.3: options.label of max_label_bytes is fine; over it → too_large, field options.label."""
    n = limits["max_label_bytes"]
    body = ok(conn.call("reset", task=task_id, layer=0, options={"label": "l" * n}))
    ok(conn.call("close", session=body["session"]))
    request_id = conn.send("reset", task=task_id, layer=0, options={"label": "l" * (n + 1)})
    err(conn.wait(request_id), "too_large", field="options.label", id=request_id)


@pytest.mark.parametrize("field", ["content", "old", "new"])
def test_action_strings_over_max_file_bytes(open_episode, limits, field: str) -> None:
    """§5, §7.4: write_file.content, edit.old, edit.new over max_file_bytes → too_large error reply
    naming the field; no step consumed."""
    ep = open_episode()
    big = "x" * (limits["max_file_bytes"] + 1)
    if field == "content":
        action = {"type": "write_file", "path": "big.cuh", "content": big}
    else:
        action = {"type": "edit", "path": ep.main_file, "old": "a", "new": "b", field: big}
    request_id = ep.send_step(action)
    err(ep.conn.wait(request_id), "too_large", field=f"action.{field}", id=request_id)
    assert ep.observe()["observation"]["step"] == 0


def test_file_of_exactly_max_file_bytes(open_episode, limits) -> None:
    """§5: a file of max_file_bytes is allowed; an edit that grows it past the limit fails
    (too_large outcome) and leaves the file unchanged."""
    ep = open_episode()
    content = "a" + "x" * (limits["max_file_bytes"] - 1)
    body = ep.ok_step({"type": "write_file", "path": "full.cuh", "content": content})
    assert body["observation"]["last"]["ok"] is True, body["observation"]["last"]
    body = ep.ok_step({"type": "edit", "path": "full.cuh", "old": "a", "new": "ab"})
    outcome_failure(body, "edit", "too_large")
    assert body["observation"]["files"]["full.cuh"] == content


def test_patch_growing_a_file_past_the_limit(open_episode, limits) -> None:
    """§5: a file after patch over max_file_bytes → too_large outcome, nothing changes."""
    ep = open_episode()
    line = "y" * 1000 + "\n"
    lines = limits["max_file_bytes"] // len(line)
    ep.ok_step({"type": "write_file", "path": "g.cuh", "content": line * lines})
    added = lines // 2 + 2
    diff = f"--- a/g.cuh\n+++ b/g.cuh\n@@ -1,1 +1,{added + 1} @@\n {line}" + f"+{line}" * added
    if len(diff) > limits["max_string_bytes"]:
        pytest.skip("the diff would be over max_string_bytes")
    files = ep.observation["files"]
    body = ep.ok_step({"type": "patch", "diff": diff})
    outcome_failure(body, "patch", "too_large")
    assert body["observation"]["files"] == files


def many_files(ep: Episode, count: int, size: int) -> list[dict[str, Any]]:
    """Writes `count` files of `size` bytes; returns each step's reply."""
    return [ep.ok_step({"type": "write_file", "path": f"f{i}.cuh", "content": "z" * size}) for i in range(count)]


def test_max_files(open_episode, limits) -> None:
    """§5: a workspace holds max_files files; one more → too_large outcome."""
    n = limits["max_files"]
    ep = open_episode(options={"max_steps": n + 5})
    if ep.observation["budget"]["max_steps"] < n + 1:
        pytest.skip("the server's max steps are fewer than max_files + 1")
    have = len(ep.observation["files"])
    replies = many_files(ep, n - have, 1)
    assert all(r["observation"]["last"]["ok"] for r in replies)
    assert len(ep.observation["files"]) == n
    body = ep.ok_step({"type": "write_file", "path": "one_more.cuh", "content": "z"})
    outcome_failure(body, "write_file", "too_large")
    assert len(body["observation"]["files"]) == n


def test_max_workspace_bytes(open_episode, limits) -> None:
    """§5: all files together over max_workspace_bytes → too_large outcome."""
    size = limits["max_file_bytes"]
    total = limits["max_workspace_bytes"]
    count = total // size + 1
    if count + 1 > limits["max_files"]:
        pytest.skip("max_files is reached before max_workspace_bytes")
    ep = open_episode(options={"max_steps": count + 5})
    if ep.observation["budget"]["max_steps"] < count + 1:
        pytest.skip("the server's max steps are too few")
    replies = many_files(ep, count, size)
    oks = [r["observation"]["last"]["ok"] for r in replies]
    first_fail = oks.index(False) if False in oks else None
    assert first_fail is not None, "the workspace grew past max_workspace_bytes"
    outcome_failure(replies[first_fail], "write_file", "too_large")
    used = sum(len(c.encode()) for c in replies[first_fail]["observation"]["files"].values())
    assert used <= total < used + size


def test_max_path_bytes(open_episode, limits) -> None:
    """§5, §8: a path of max_path_bytes is fine; one byte more → path_violation outcome."""
    n = limits["max_path_bytes"]
    ep = open_episode()
    ok_path = "p" * (n - 3) + ".cu"
    assert ep.ok_step({"type": "write_file", "path": ok_path, "content": ""})["observation"]["last"]["ok"] is True
    body = ep.ok_step({"type": "write_file", "path": "p" * (n - 2) + ".cu", "content": ""})
    outcome_failure(body, "write_file", "path_violation")


def test_message_under_the_limit_with_big_content(open_episode, limits) -> None:
    """§5: a request near (under) max_message_bytes is decoded: three max-size strings in one message."""
    n = min(limits["max_file_bytes"], limits["max_string_bytes"])
    if 3 * n + 4096 > limits["max_message_bytes"]:
        pytest.skip("three max-size strings do not fit in a message")
    ep = open_episode()
    body = ep.ok_step({"type": "write_file", "path": "m.cuh", "content": "m" * n, "pad1": "p" * n, "pad2": "q" * n})
    assert body["observation"]["last"]["ok"] is True

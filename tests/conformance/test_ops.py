"""PROTOCOL.md section 7 (the seven ops) and section 9 (the observation)."""
from __future__ import annotations

from typing import Any

import pytest

from wireclient import Conn, err, ok

LIMIT_KEYS = ["max_message_bytes", "max_depth", "max_string_bytes", "max_array_items", "max_map_entries",
              "max_total_items", "max_file_bytes", "max_files", "max_path_bytes", "max_workspace_bytes",
              "max_label_bytes"]
BUDGET_UINTS = ["steps_used", "max_steps", "compiles_used", "max_compiles", "evaluations_used", "max_evaluations"]


def is_uint(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_info(info: dict[str, Any], task: str, layer: int) -> None:
    """§10: info always carries {end_reason: nil or str, layer: uint, task: str}."""
    assert "end_reason" in info and (info["end_reason"] is None or isinstance(info["end_reason"], str))
    assert info["layer"] == layer
    assert info["task"] == task


def check_observation(obs: dict[str, Any], task: str, layer: int) -> None:
    """§9: every field of the observation with its type."""
    t = obs["task"]
    assert t["id"] == task
    for key in ("title", "category", "statement", "signature", "entry", "main_file"):
        assert isinstance(t[key], str) and t[key], f"task.{key}"
    assert t["entry"] in t["signature"]
    assert isinstance(t["workloads"], list) and t["workloads"]
    for w in t["workloads"]:
        assert isinstance(w["name"], str) and w["name"]
        assert isinstance(w["sizes"], dict) and all(isinstance(k, str) and isinstance(v, int)
                                                    for k, v in w["sizes"].items())
        assert isinstance(w["timed"], bool)
        if w.get("dtypes") is not None:
            assert all(isinstance(v, str) for v in w["dtypes"].values())
        if w.get("params") is not None:
            assert isinstance(w["params"], dict)
    assert obs["layer"] == layer
    assert isinstance(obs["guidance"], list)
    assert [g["layer"] for g in obs["guidance"]] == list(range(1, layer + 1)), "guidance: layers 1..layer"
    for g in obs["guidance"]:
        assert isinstance(g["title"], str) and isinstance(g["text"], str) and g["text"]
    assert isinstance(obs["files"], dict) and t["main_file"] in obs["files"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in obs["files"].items())
    assert obs["last"] is None or isinstance(obs["last"], dict)
    b = obs["budget"]
    for key in BUDGET_UINTS:
        assert is_uint(b[key]), f"budget.{key} must be a uint"
    assert isinstance(b["seconds_used"], float) and isinstance(b["wall_seconds"], float)
    assert is_uint(obs["step"]) and obs["step"] == b["steps_used"]
    assert isinstance(obs["done"], bool)
    assert obs["end_reason"] is None or isinstance(obs["end_reason"], str)
    assert (obs["end_reason"] is None) == (not obs["done"])


# -- 7.1 hello ------------------------------------------------------------------------------------
def test_hello_reply_fields(conn: Conn) -> None:
    """§7.1: server, version, protocol, gpus, toolchain, limits, config with their types."""
    body = ok(conn.call("hello", client="d2k-conformance"))
    assert body["server"] == "d2k-gym"
    assert isinstance(body["version"], str) and body["version"]
    assert isinstance(body["protocol"], list) and 1 in body["protocol"]
    assert isinstance(body["gpus"], list)
    for g in body["gpus"]:
        assert is_uint(g["index"]) and isinstance(g["name"], str) and is_uint(g["memory_mib"])
    assert isinstance(body["toolchain"]["nvcc"], str)
    assert isinstance(body["toolchain"]["host_compiler"], str)
    assert isinstance(body["config"], dict)
    assert is_uint(body["config"]["max_sessions"])
    assert isinstance(body["config"]["idle_timeout_s"], (int, float))


def test_hello_limits_has_every_key_of_section_5(limits: dict[str, Any]) -> None:
    """§5, §7.1: hello.limits holds every limit key of section 5, each a positive uint."""
    missing = [k for k in LIMIT_KEYS if k not in limits]
    assert not missing, f"hello.limits lacks {missing}"
    for k in LIMIT_KEYS:
        assert is_uint(limits[k]) and limits[k] > 0, k


def test_hello_client_field_is_optional(conn: Conn) -> None:
    """§7.1: client? is optional; without it hello still answers."""
    assert ok(conn.call("hello"))["server"] == "d2k-gym"


def test_hello_client_must_be_a_string(conn: Conn) -> None:
    """§2: a field whose value has the wrong type is bad_request naming the field."""
    err(conn.call("hello", client=5), "bad_request", field="client")


# -- 7.2 list_tasks ---------------------------------------------------------------------------------
def test_list_tasks_reply(conn: Conn) -> None:
    """§7.2: tasks in a stable order, each with id, title, category, layers, workloads."""
    first = ok(conn.call("list_tasks"))["tasks"]
    second = ok(conn.call("list_tasks"))["tasks"]
    assert first == second, "list_tasks: a stable order"
    assert first
    ids = [t["id"] for t in first]
    assert len(set(ids)) == len(ids)
    for t in first:
        assert isinstance(t["id"], str) and t["id"]
        assert isinstance(t["title"], str) and isinstance(t["category"], str)
        assert t["layers"] == [0, 1, 2, 3]
        assert is_uint(t["workloads"]) and t["workloads"] >= 1


def test_list_tasks_workloads_count_visible_ones_only(conn: Conn, open_episode, task_id: str, tasks) -> None:
    """§7.2, §9: list_tasks' workloads is the number of visible workloads the observation shows."""
    listed = next(t for t in tasks if t["id"] == task_id)
    ep = open_episode()
    assert len(ep.observation["task"]["workloads"]) == listed["workloads"]
    assert ep.observation["task"]["title"] == listed["title"]
    assert ep.observation["task"]["category"] == listed["category"]


# -- 7.3 reset -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", [0, 1, 2, 3])
def test_reset_reply_and_first_observation(open_episode, task_id: str, layer: int) -> None:
    """§7.3, §9: session, the first observation (last nil, step 0, open) and info at each layer."""
    ep = open_episode(layer=layer, seed=7, options={"label": "conformance"})
    body = ok(ep.reset_reply)
    assert isinstance(body["session"], str) and body["session"]
    obs = body["observation"]
    check_observation(obs, task_id, layer)
    assert obs["last"] is None and obs["step"] == 0 and obs["done"] is False and obs["end_reason"] is None
    check_info(body["info"], task_id, layer)
    assert body["info"]["end_reason"] is None


def test_reset_opens_distinct_sessions(open_episode) -> None:
    """§7.3: every reset (fresh id) opens a new session."""
    assert open_episode().id != open_episode().id


def test_reset_budget_options_are_in_force(open_episode) -> None:
    """§7.3: given budget options are the budget in force (observation.budget), within the maxima."""
    ep = open_episode(options={"max_steps": 7, "max_compiles": 0, "max_evaluations": 0, "wall_seconds": 123.5})
    b = ep.observation["budget"]
    assert (b["max_steps"], b["max_compiles"], b["max_evaluations"]) == (7, 0, 0)
    assert b["wall_seconds"] == 123.5
    assert b["steps_used"] == b["compiles_used"] == b["evaluations_used"] == 0


def test_reset_defaults_come_from_config(open_episode, hello) -> None:
    """§7.3: absent budget options take the server's defaults (hello.config)."""
    defaults = hello["config"].get("default_budget")
    if not isinstance(defaults, dict):
        pytest.skip("hello.config has no default_budget map (its keys are informative)")
    b = open_episode().observation["budget"]
    for key in ("max_steps", "max_compiles", "max_evaluations", "wall_seconds"):
        if key in defaults:
            assert b[key] == defaults[key], key


def test_reset_options_are_clamped_to_the_maxima(open_episode, hello) -> None:
    """§7.3: given budgets are clamped to the server's maxima (hello.config)."""
    maxima = hello["config"].get("max_budget")
    if not isinstance(maxima, dict):
        pytest.skip("hello.config has no max_budget map (its keys are informative)")
    big = 2**32 - 1
    ep = open_episode(options={"max_steps": big, "max_compiles": big, "max_evaluations": big,
                               "wall_seconds": 1e12})
    b = ep.observation["budget"]
    for key in ("max_steps", "max_compiles", "max_evaluations", "wall_seconds"):
        if key in maxima:
            assert b[key] == maxima[key], key


TASK = object()  # stands for the task under test


@pytest.mark.parametrize("fields, field", [
    ({"layer": 0}, "task"),
    ({"task": "", "layer": 0}, "task"),
    ({"task": 5, "layer": 0}, "task"),
    ({"task": TASK}, "layer"),
    ({"task": TASK, "layer": None}, "layer"),
    ({"task": TASK, "layer": 4}, "layer"),
    ({"task": TASK, "layer": -1}, "layer"),
    ({"task": TASK, "layer": "1"}, "layer"),
    ({"task": TASK, "layer": 0, "seed": -1}, "seed"),
    ({"task": TASK, "layer": 0, "seed": "7"}, "seed"),
    ({"task": TASK, "layer": 0, "options": [1]}, "options"),
    ({"task": TASK, "layer": 0, "options": {"max_steps": 0}}, "options.max_steps"),
    ({"task": TASK, "layer": 0, "options": {"max_steps": 2**32}}, "options.max_steps"),
    ({"task": TASK, "layer": 0, "options": {"max_steps": 1.0}}, "options.max_steps"),
    ({"task": TASK, "layer": 0, "options": {"max_compiles": -1}}, "options.max_compiles"),
    ({"task": TASK, "layer": 0, "options": {"max_compiles": 2**32}}, "options.max_compiles"),
    ({"task": TASK, "layer": 0, "options": {"max_evaluations": 2**40}}, "options.max_evaluations"),
    ({"task": TASK, "layer": 0, "options": {"max_evaluations": "3"}}, "options.max_evaluations"),
    ({"task": TASK, "layer": 0, "options": {"wall_seconds": 0}}, "options.wall_seconds"),
    ({"task": TASK, "layer": 0, "options": {"wall_seconds": -2.5}}, "options.wall_seconds"),
    ({"task": TASK, "layer": 0, "options": {"wall_seconds": "10"}}, "options.wall_seconds"),
    ({"task": TASK, "layer": 0, "options": {"label": 12}}, "options.label"),
])
def test_reset_bad_fields(conn: Conn, task_id: str, fields: dict[str, Any], field: str) -> None:
    """§7.3, §4: malformed reset fields are bad_request naming the field; no session is opened."""
    request = {k: (task_id if v is TASK else v) for k, v in fields.items()}
    before = ok(conn.call("stats"))["sessions"]["total_opened"]
    err(conn.call("reset", **request), "bad_request", field=field)
    assert ok(conn.call("stats"))["sessions"]["total_opened"] == before, "an error reply opened a session"


def test_reset_unknown_task(conn: Conn, tasks) -> None:
    """§7.3, §4: a task id list_tasks does not list → unknown_task, field task."""
    ids = {t["id"] for t in tasks}
    name = "no_such_task"
    while name in ids:
        name += "_"
    err(conn.call("reset", task=name, layer=0), "unknown_task", field="task")


# -- 7.4 step (reply shape; actions in test_actions.py) -------------------------------------------------------
def test_step_reply_fields(open_episode, task_id: str) -> None:
    """§7.4: observation, reward (float), terminated, truncated (bools), info."""
    ep = open_episode(layer=1)
    body = ep.ok_step({"type": "write_file", "path": "helper.cuh", "content": "// helper\n"})
    check_observation(body["observation"], task_id, 1)
    assert isinstance(body["reward"], float)
    assert body["terminated"] is False and body["truncated"] is False
    check_info(body["info"], task_id, 1)
    assert body["observation"]["step"] == 1
    assert body["observation"]["last"] == {**body["observation"]["last"], "action": "write_file", "ok": True}


@pytest.mark.parametrize("session", [None, 5, ""])
def test_step_session_malformed(conn: Conn, session) -> None:
    """§7.4: session missing or not a string → bad_request (field session)."""
    fields = {"action": {"type": "compile"}}
    if session is not None:
        fields["session"] = session
    err(conn.call("step", **fields), "bad_request", field="session")


@pytest.mark.parametrize("op", ["step", "observe", "close"])
def test_unknown_session(conn: Conn, op: str) -> None:
    """§4, §7: a session that was never opened → unknown_session."""
    fields = {"session": "0" * 32}
    if op == "step":
        fields["action"] = {"type": "compile"}
    err(conn.call(op, **fields), "unknown_session")


# -- 7.5 observe --------------------------------------------------------------------------------------
def test_observe_returns_the_current_observation_without_a_step(open_episode, task_id: str) -> None:
    """§7.5: observe answers observation and info and takes no step."""
    ep = open_episode(layer=2)
    ep.ok_step({"type": "write_file", "path": "b.cuh", "content": "// b\n"})
    first = ep.observe()
    second = ep.observe()
    check_observation(first["observation"], task_id, 2)
    check_info(first["info"], task_id, 2)
    assert first["observation"]["step"] == second["observation"]["step"] == 1
    assert first["observation"]["files"]["b.cuh"] == "// b\n"
    assert first["observation"]["last"]["action"] == "write_file"


@pytest.mark.parametrize("session", [None, 5, ""])
def test_observe_session_malformed(conn: Conn, session) -> None:
    """§7.5: session missing or not a string → bad_request, field session."""
    fields = {} if session is None else {"session": session}
    err(conn.call("observe", **fields), "bad_request", field="session")


# -- 7.6 close -----------------------------------------------------------------------------------------
def test_close_reply_and_afterwards(open_episode, conn: Conn, failure_reward: float) -> None:
    """§7.6: session, end_reason "closed", steps, total_reward; afterwards the id is unknown."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "c.cuh", "content": "// c\n"})
    ep.step({"type": "edit", "path": "c.cuh", "old": "not there", "new": "x"})
    body = ok(ep.close())
    assert body["session"] == ep.id
    assert body["end_reason"] == "closed"
    assert body["steps"] == 2
    assert isinstance(body["total_reward"], float)
    assert body["total_reward"] == pytest.approx(0.0 + failure_reward)  # §11: 0.0 for the write, the failure reward
    err(conn.call("observe", session=ep.id), "unknown_session", field="session")
    err(conn.call("step", session=ep.id, action={"type": "compile"}), "unknown_session")
    err(conn.call("close", session=ep.id), "unknown_session")


@pytest.mark.parametrize("session", [None, 5, ""])
def test_close_session_malformed(conn: Conn, session) -> None:
    """§7.6: session missing or not a string → bad_request."""
    fields = {} if session is None else {"session": session}
    err(conn.call("close", **fields), "bad_request", field="session")


# -- 7.7 stats -----------------------------------------------------------------------------------------
def test_stats_reply_fields(conn: Conn, hello) -> None:
    """§7.7: uptime_s, sessions{active, ended, total_opened}, requests, errors, in_flight, compile, gpus."""
    body = ok(conn.call("stats"))
    assert isinstance(body["uptime_s"], float) and body["uptime_s"] >= 0
    for key in ("active", "ended", "total_opened"):
        assert is_uint(body["sessions"][key]), f"sessions.{key}"
    for key in ("requests", "errors", "in_flight"):
        assert is_uint(body[key]), key
    for key in ("workers", "queued", "running", "cache_hits", "cache_misses"):
        assert is_uint(body["compile"][key]), f"compile.{key}"
    assert isinstance(body["gpus"], list) and len(body["gpus"]) == len(hello["gpus"])
    for g in body["gpus"]:
        assert is_uint(g["index"]) and is_uint(g["queued"]) and is_uint(g["running"])
        assert isinstance(g["busy_fraction"], float)


def test_stats_counts_requests_errors_and_sessions(conn: Conn, open_episode) -> None:
    """§7.7: requests and errors count what was received and refused; total_opened counts resets."""
    before = ok(conn.call("stats"))
    open_episode()
    err(conn.call("dance"), "unknown_op")
    after = ok(conn.call("stats"))
    assert after["requests"] >= before["requests"] + 3
    assert after["errors"] >= before["errors"] + 1
    assert after["sessions"]["total_opened"] >= before["sessions"]["total_opened"] + 1
    assert after["sessions"]["active"] >= 1


def test_error_messages_stay_within_2048_bytes(conn: Conn) -> None:
    """§3: error.message is at most 2048 bytes even when it quotes a huge request field."""
    err(conn.call("reset", task="t" * 100_000, layer=0), "unknown_task", field="task")
    err(conn.call("o" * 100_000), "unknown_op", field="op")


def test_a_session_is_not_bound_to_the_socket_that_opened_it(open_episode, connect) -> None:
    """§6: sessions are addressed by id (two clients may drive one session, with distinct ids)."""
    ep = open_episode()
    other = connect()
    body = ok(other.call("step", session=ep.id, action={"type": "write_file", "path": "o.cuh", "content": "o"}))
    assert body["observation"]["step"] == 1
    assert ep.observe()["observation"]["files"]["o.cuh"] == "o"

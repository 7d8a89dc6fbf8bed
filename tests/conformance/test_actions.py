"""PROTOCOL.md section 8 (the six actions, workspace paths, diffs, outcome-level failures) and
section 11 (rewards without a GPU)."""
from __future__ import annotations

from typing import Any

import pytest

from conftest import unique_comment
from wireclient import OUTCOME_CODES, err


def outcome_failure(body: dict[str, Any], action: str, code: str) -> dict[str, Any]:
    """§8: a well-formed action that cannot be carried out: ok reply, last.ok false, last.error."""
    last = body["observation"]["last"]
    assert last["action"] == action
    assert last["ok"] is False, f"expected the {action} to fail with {code}: {last!r}"
    assert isinstance(last["error"], dict)
    assert last["error"]["code"] in OUTCOME_CODES
    assert last["error"]["code"] == code, f"expected last.error.code {code}, got {last['error']!r}"
    assert isinstance(last["error"]["message"], str) and last["error"]["message"]
    return last


def check_compile(compile_: dict[str, Any]) -> None:
    """§9: last.compile's fields and types."""
    assert isinstance(compile_["ok"], bool)
    assert isinstance(compile_["cached"], bool)
    assert isinstance(compile_["seconds"], float) and compile_["seconds"] >= 0
    assert isinstance(compile_["exit_status"], int)
    assert isinstance(compile_["timed_out"], bool)
    assert isinstance(compile_["log"], str)
    assert isinstance(compile_["log_truncated"], bool)
    assert isinstance(compile_["diagnostics"], list)
    for d in compile_["diagnostics"]:
        assert isinstance(d["file"], str) and isinstance(d["message"], str) and isinstance(d["severity"], str)
        assert isinstance(d["line"], int) and isinstance(d["column"], int)


# -- write_file ------------------------------------------------------------------------------------------
def test_write_file_creates_and_replaces(open_episode) -> None:
    """§8 write_file: creates or replaces a workspace file; a step, reward 0.0 (§11)."""
    ep = open_episode()
    body = ep.ok_step({"type": "write_file", "path": "lib/util.cuh", "content": "// one\n"})
    assert body["observation"]["files"]["lib/util.cuh"] == "// one\n"
    assert body["reward"] == 0.0 and body["observation"]["last"] == {**body["observation"]["last"],
                                                                     "action": "write_file", "ok": True}
    body = ep.ok_step({"type": "write_file", "path": "lib/util.cuh", "content": "// two\n"})
    assert body["observation"]["files"]["lib/util.cuh"] == "// two\n"
    assert body["observation"]["step"] == 2


def test_write_file_may_be_empty_and_utf8(open_episode) -> None:
    """§8 write_file: content is any str (empty, non-ASCII UTF-8)."""
    ep = open_episode()
    assert ep.ok_step({"type": "write_file", "path": "e.h", "content": ""})["observation"]["files"]["e.h"] == ""
    text = "// π ≈ 3.14159, naïve café\n"
    assert ep.ok_step({"type": "write_file", "path": "u.hpp", "content": text})["observation"]["files"]["u.hpp"] == text


# -- workspace paths -------------------------------------------------------------------------------------------
GOOD_PATHS = ["k.cu", "a.cuh", "b.h", "c.hpp", "A-Z_0.9.cu", "d1/d2/d3/f.cuh", "x/y.cu"]
BAD_PATHS = ["/abs.cu", "../up.cu", "a/../b.cu", "a//b.cu", "./a.cu", "a/./b.cu", ".hidden.cu", "d/.h.cuh",
             "a b.cu", "a$.cu", "notes.txt", "kernel", "k.cu/", "d1/d2/d3/d4/f.cu", "", "kérnel.cu",
             "k.cu\\x.cu", "a:b.cu"]


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_allowed_paths(open_episode, path: str) -> None:
    """§8 workspace paths: relative, <= 4 components, A-Za-z0-9._-/, allowed extensions."""
    ep = open_episode()
    body = ep.ok_step({"type": "write_file", "path": path, "content": "// ok\n"})
    assert body["observation"]["last"]["ok"] is True, body["observation"]["last"]
    assert body["observation"]["files"][path] == "// ok\n"


@pytest.mark.parametrize("path", BAD_PATHS)
def test_path_violations(open_episode, path: str, failure_reward: float) -> None:
    """§8: a path that is not allowed → the step fails with path_violation, workspace unchanged."""
    ep = open_episode()
    files = dict(ep.observation["files"])
    body = ep.ok_step({"type": "write_file", "path": path, "content": "// no\n"})
    outcome_failure(body, "write_file", "path_violation")
    assert body["observation"]["files"] == files
    assert body["observation"]["step"] == 1, "a failed action still consumes a step"
    assert body["reward"] == pytest.approx(failure_reward)
    assert body["terminated"] is False and body["truncated"] is False


def test_edit_path_violation(open_episode) -> None:
    """§8: edit's path follows the same rules."""
    ep = open_episode()
    outcome_failure(ep.ok_step({"type": "edit", "path": "../k.cu", "old": "a", "new": "b"}), "edit",
                    "path_violation")


# -- edit ---------------------------------------------------------------------------------------------------------
def test_edit_replaces_the_unique_occurrence(open_episode) -> None:
    """§8 edit: old occurs exactly once and is replaced by new."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "e.cuh", "content": "int a = 1;\nint b = 2;\n"})
    body = ep.ok_step({"type": "edit", "path": "e.cuh", "old": "b = 2", "new": "b = 3"})
    assert body["observation"]["last"]["ok"] is True
    assert body["observation"]["files"]["e.cuh"] == "int a = 1;\nint b = 3;\n"
    assert body["reward"] == 0.0


@pytest.mark.parametrize("old", ["missing text", "int", ""])
def test_edit_old_absent_not_unique_or_empty(open_episode, old: str, failure_reward: float) -> None:
    """§8: edit text absent, not unique or empty → invalid_action outcome, workspace unchanged."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "e.cuh", "content": "int a = 1;\nint b = 2;\n"})
    files = dict(ep.observation["files"])
    body = ep.ok_step({"type": "edit", "path": "e.cuh", "old": old, "new": "x"})
    last = outcome_failure(body, "edit", "invalid_action")
    assert body["observation"]["files"] == files
    assert body["reward"] == pytest.approx(failure_reward)
    assert last["error"]["message"]


def test_edit_on_a_missing_file(open_episode) -> None:
    """§8: edit on a missing file → invalid_action outcome."""
    ep = open_episode()
    outcome_failure(ep.ok_step({"type": "edit", "path": "nope.cuh", "old": "a", "new": "b"}), "edit",
                    "invalid_action")


# -- patch ----------------------------------------------------------------------------------------------------------
def test_patch_applies_a_unified_diff_over_several_files(open_episode) -> None:
    """§8 patch: git-style a/ b/ prefixes, a new file from /dev/null, prose ignored; all files at once."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "p.cuh", "content": "one\ntwo\nthree\n"})
    diff = ("Some prose before the diff.\n"
            "diff --git a/p.cuh b/p.cuh\n"
            "index 1111111..2222222 100644\n"
            "--- a/p.cuh\n+++ b/p.cuh\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
            "--- /dev/null\n+++ b/new.cuh\n@@ -0,0 +1,2 @@\n+// new\n+int n;\n")
    body = ep.ok_step({"type": "patch", "diff": diff})
    assert body["observation"]["last"]["ok"] is True, body["observation"]["last"]
    files = body["observation"]["files"]
    assert files["p.cuh"] == "one\nTWO\nthree\n"
    assert files["new.cuh"] == "// new\nint n;\n"


def test_patch_deletes_a_file(open_episode) -> None:
    """§8 patch: +++ /dev/null deletes a file (its hunks remove all of it)."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "gone.cuh", "content": "a\nb\n"})
    body = ep.ok_step({"type": "patch", "diff": "--- a/gone.cuh\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n"})
    assert body["observation"]["last"]["ok"] is True, body["observation"]["last"]
    assert "gone.cuh" not in body["observation"]["files"]


def test_patch_with_an_offset_hunk_and_no_newline_marker(open_episode) -> None:
    """§8 patch: a hunk whose line numbers are off applies where its lines match; '\\ No newline'."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "q.cuh", "content": "x\ny\nz"})
    diff = ("--- q.cuh\t2026-01-01 00:00:00\n+++ q.cuh\t2026-01-01 00:00:01\n"
            "@@ -5,2 +5,2 @@\n y\n-z\n\\ No newline at end of file\n+Z\n\\ No newline at end of file\n")
    body = ep.ok_step({"type": "patch", "diff": diff})
    assert body["observation"]["last"]["ok"] is True, body["observation"]["last"]
    assert body["observation"]["files"]["q.cuh"] == "x\ny\nZ"


@pytest.mark.parametrize("diff", [
    "--- a/p.cuh\n+++ b/p.cuh\n@@ -1,3 +1,3 @@\n one\n-TWO\n+2\n three\n",                 # context mismatch
    "--- a/p.cuh\n+++ b/p.cuh\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n",                          # wrong counts
    "--- a/missing.cuh\n+++ b/missing.cuh\n@@ -1 +1 @@\n-a\n+b\n",                            # no such file
    "--- a/p.cuh\n+++ b/p.cuh\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    "--- a/missing.cuh\n+++ b/missing.cuh\n@@ -1 +1 @@\n-a\n+b\n",                            # all or none
])
def test_patch_that_does_not_apply_changes_nothing(open_episode, diff: str, failure_reward: float) -> None:
    """§8: a patch that does not apply → invalid_action outcome; nothing changes (all files or none)."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "p.cuh", "content": "one\ntwo\nthree\n"})
    files = dict(ep.observation["files"])
    body = ep.ok_step({"type": "patch", "diff": diff})
    outcome_failure(body, "patch", "invalid_action")
    assert body["observation"]["files"] == files
    assert body["reward"] == pytest.approx(failure_reward)


def test_patch_failure_message_names_the_file_and_hunk(open_episode) -> None:
    """§8: a patch that does not apply changes nothing; the message names the file and the hunk."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "p.cuh", "content": "one\ntwo\nthree\n"})
    body = ep.ok_step({"type": "patch", "diff": "--- a/p.cuh\n+++ b/p.cuh\n@@ -1,3 +1,3 @@\n one\n-TWO\n+2\n three\n"})
    last = outcome_failure(body, "patch", "invalid_action")
    assert "p.cuh" in last["error"]["message"]
    assert "hunk" in last["error"]["message"].lower() or "@@" in last["error"]["message"]


@pytest.mark.parametrize("diff", [
    "diff --git a/p.cuh b/q.cuh\nsimilarity index 100%\nrename from p.cuh\nrename to q.cuh\n",
    "diff --git a/p.cuh b/q.cuh\nsimilarity index 90%\ncopy from p.cuh\ncopy to q.cuh\n",
    "diff --git a/p.cuh b/p.cuh\nold mode 100644\nnew mode 100755\n",
    "diff --git a/p.cuh b/p.cuh\nBinary files a/p.cuh and b/p.cuh differ\n",
    "just prose, no diff at all\n",
])
def test_patch_refuses_renames_copies_modes_and_binaries(open_episode, diff: str) -> None:
    """§8: renames, copies, mode-only changes and binary diffs are refused; nothing changes."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "p.cuh", "content": "one\ntwo\nthree\n"})
    files = dict(ep.observation["files"])
    body = ep.ok_step({"type": "patch", "diff": diff})
    outcome_failure(body, "patch", "invalid_action")
    assert body["observation"]["files"] == files


def test_patch_to_a_bad_path(open_episode) -> None:
    """§8: a patch creating a file at a disallowed path fails (path_violation) and changes nothing."""
    ep = open_episode()
    files = dict(ep.observation["files"])
    body = ep.ok_step({"type": "patch", "diff": "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+hi\n"})
    outcome_failure(body, "patch", "path_violation")
    assert body["observation"]["files"] == files


# -- compile ----------------------------------------------------------------------------------------------------------
def test_compile_of_the_starter(open_episode) -> None:
    """§8 compile, §9 last.compile: the starter compiles; reward 0.0; compiles_used counts it."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": ep.main_file,
                "content": ep.observation["files"][ep.main_file] + unique_comment()})
    body = ep.ok_step({"type": "compile"})
    last = body["observation"]["last"]
    assert last["action"] == "compile" and last["ok"] is True, last
    check_compile(last["compile"])
    assert last["compile"]["ok"] is True and last["compile"]["timed_out"] is False
    assert last["compile"]["exit_status"] == 0
    assert body["reward"] == 0.0
    assert body["observation"]["budget"]["compiles_used"] == 1
    assert body["observation"]["step"] == 2


def test_compile_error(open_episode, compile_error_reward: float) -> None:
    """§8: a compile that fails → last.ok false, compile_error, last.compile filled with diagnostics."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": ep.main_file,
                "content": "this is not C++ at all;" + unique_comment()})
    body = ep.ok_step({"type": "compile"})
    last = outcome_failure(body, "compile", "compile_error")
    check_compile(last["compile"])
    assert last["compile"]["ok"] is False
    assert last["compile"]["diagnostics"] or last["compile"]["log"], "a failed compile says why"
    assert body["reward"] == pytest.approx(compile_error_reward)
    assert body["observation"]["budget"]["compiles_used"] == 1


def test_compile_sees_the_other_workspace_files(open_episode) -> None:
    """§8 compile: the main file is compiled with the other workspace files beside it."""
    ep = open_episode()
    ep.ok_step({"type": "write_file", "path": "inc/value.cuh", "content": "#define D2K_VALUE 3\n"})
    source = ('#include "inc/value.cuh"\nstatic_assert(D2K_VALUE == 3, "header seen");\n'
              + ep.observation["files"][ep.main_file] + unique_comment())
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": source})
    last = ep.ok_step({"type": "compile"})["observation"]["last"]
    assert last["ok"] is True, last


def test_compile_budget_exhausted(open_episode, failure_reward: float) -> None:
    """§8: no compiles left → budget_exhausted outcome; the step is consumed."""
    ep = open_episode(options={"max_compiles": 0})
    body = ep.ok_step({"type": "compile"})
    outcome_failure(body, "compile", "budget_exhausted")
    assert body["observation"]["step"] == 1
    assert body["observation"]["budget"]["compiles_used"] == 0
    assert body["reward"] < 0


# -- request-level action errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("action, field", [
    ({"type": "dance"}, "action.type"),
    ({}, "action.type"),
    ({"type": 3}, "action.type"),
    ({"type": "write_file", "content": "x"}, "action.path"),
    ({"type": "write_file", "path": "k.cu"}, "action.content"),
    ({"type": "write_file", "path": 1, "content": "x"}, "action.path"),
    ({"type": "write_file", "path": "k.cu", "content": ["x"]}, "action.content"),
    ({"type": "edit", "path": "k.cu", "new": "x"}, "action.old"),
    ({"type": "edit", "path": "k.cu", "old": "x"}, "action.new"),
    ({"type": "patch"}, "action.diff"),
    ({"type": "patch", "diff": 5}, "action.diff"),
])
def test_malformed_actions_are_invalid_action_and_take_no_step(open_episode, action, field: str) -> None:
    """§7.4, §8: unknown type, missing or mistyped field → invalid_action error reply, no step consumed."""
    ep = open_episode()
    err(ep.step(action), "invalid_action", field=field)
    assert ep.observe()["observation"]["step"] == 0


@pytest.mark.parametrize("action", [None, 5, "compile", ["compile"]])
def test_action_must_be_a_map(open_episode, action) -> None:
    """§7.4: action missing or not a map → invalid_action, field action."""
    ep = open_episode()
    fields = {} if action is None else {"action": action}
    err(ep.conn.call("step", session=ep.id, **fields), "invalid_action", field="action")
    assert ep.observe()["observation"]["step"] == 0


# -- evaluate / submit ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["evaluate", "submit"])
def test_evaluate_and_submit_without_a_gpu_are_no_gpu(open_episode, has_gpu: bool, kind: str) -> None:
    """§4, §7.1, §7.4: with hello.gpus empty, evaluate/submit → no_gpu error; no step, episode open."""
    if has_gpu:
        pytest.skip("hello lists GPUs: test_gpu.py checks real evaluations")
    ep = open_episode()
    err(ep.step({"type": kind}), "no_gpu")
    obs = ep.observe()["observation"]
    assert obs["step"] == 0 and obs["done"] is False
    assert obs["budget"]["evaluations_used"] == 0

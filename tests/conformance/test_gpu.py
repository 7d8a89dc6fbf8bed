"""PROTOCOL.md sections 8, 9, 10 and 11 on a server whose hello lists GPUs: a real evaluation's
reply, submit ending the episode, the evaluation budget. Skipped when hello.gpus is empty (then
test_actions.py checks that evaluate and submit answer no_gpu)."""
from __future__ import annotations

from typing import Any

import pytest

from conftest import unique_comment
from test_actions import outcome_failure
from wireclient import OUTCOME_CODES, err, ok

pytestmark = pytest.mark.gpu

STATUSES = {"ok", "incorrect", "runtime_error", "timeout", "sandbox_violation", "flagged"}

VECTOR_ADD = r"""
#include <cstdint>
#include <cuda_runtime.h>
__global__ void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  add<<<1024, 256, 0, stream>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
"""


@pytest.fixture(autouse=True)
def _needs_gpu(has_gpu: bool) -> None:
    if not has_gpu:
        pytest.skip("hello.gpus is empty: no evaluation to check")


def kernel_for(ep) -> tuple[str, bool]:
    """A source to evaluate, and whether it is known to be correct (vector_add only)."""
    if ep.observation["task"]["id"] == "vector_add":
        return VECTOR_ADD + unique_comment(), True
    return ep.observation["files"][ep.main_file] + unique_comment(), False


def check_evaluation(last: dict[str, Any], obs: dict[str, Any], *, hidden_allowed: bool) -> dict[str, Any]:
    """§9 last.evaluation: status, message, flags, workloads, time_s, gpu, gpu_name, phases."""
    ev = last["evaluation"]
    assert ev["status"] in STATUSES, ev.get("status")
    assert isinstance(ev["message"], str)
    assert "flags" in ev
    assert isinstance(ev["time_s"], float)
    assert isinstance(ev["gpu"], int) and isinstance(ev["gpu_name"], str)
    assert "phases" in ev
    assert isinstance(ev["workloads"], list)
    visible = {w["name"] for w in obs["task"]["workloads"]}
    for w in ev["workloads"]:
        assert isinstance(w["name"], str) and isinstance(w["visible"], bool) and isinstance(w["correct"], bool)
        assert "checks" in w
        if w["visible"]:
            assert w["name"] in visible
        else:
            assert hidden_allowed, f"evaluate disclosed a hidden workload: {w['name']}"
        if w.get("timing") is not None:
            for key in ("median_s", "min_s", "cv"):
                assert isinstance(w["timing"][key], float), f"timing.{key}"
            assert isinstance(w["timing"]["samples"], int) and isinstance(w["timing"]["throttled"], bool)
    if ev["workloads"] and ev["status"] == "ok":
        assert visible <= {w["name"] for w in ev["workloads"]}, "every visible workload is evaluated"
    if ev["status"] == "ok":
        assert isinstance(ev["properties"], dict)
        for prop in ev["properties"].values():
            for key in ("met", "state", "layer", "title", "detail", "evidence"):
                assert key in prop, f"properties[].{key}"
            assert prop["evidence"] in ("binary", "timing", "runner"), prop["evidence"]
    return ev


def test_evaluate_reply(open_episode) -> None:
    """§8 evaluate, §9, §11: compile + evaluation on the visible workloads; the reward's breakdown in
    info.reward; evaluations_used counts it; the episode stays open."""
    ep = open_episode(layer=1)
    source, correct = kernel_for(ep)
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": source})
    body = ep.ok_step({"type": "evaluate"})
    last = body["observation"]["last"]
    assert last["action"] == "evaluate"
    assert isinstance(last["compile"], dict) and last["compile"]["ok"] is True
    ev = check_evaluation(last, body["observation"], hidden_allowed=False)
    assert last["ok"] is (ev["status"] == "ok")
    if correct:
        assert ev["status"] == "ok", ev.get("message")
        assert all(w["correct"] for w in ev["workloads"])
        assert isinstance(body["info"]["reward"], dict), "§7.4: the reward breakdown is in info.reward"
    assert isinstance(body["reward"], float)
    assert body["terminated"] is False and body["truncated"] is False
    assert body["observation"]["budget"]["evaluations_used"] == 1


def test_failed_evaluation_error_code_is_in_the_spec(open_episode) -> None:
    """§8, §9: a failed action's last.error.code is one of the codes the spec lists."""
    ep = open_episode()
    wrong = ep.observation["files"][ep.main_file] + unique_comment()  # the starter does no work
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": wrong})
    last = ep.ok_step({"type": "evaluate"})["observation"]["last"]
    assert last["ok"] is False, "the starter kernel passed evaluation"
    assert last["error"]["code"] in OUTCOME_CODES, last["error"]


def test_evaluate_with_no_evaluations_left(open_episode) -> None:
    """§8: no evaluations left → budget_exhausted outcome; the step is consumed."""
    ep = open_episode(options={"max_evaluations": 0})
    body = ep.ok_step({"type": "evaluate"})
    outcome_failure(body, "evaluate", "budget_exhausted")
    assert body["observation"]["step"] == 1


def test_submit_terminates_the_episode(open_episode, conn) -> None:
    """§8 submit, §10: submit evaluates visible and hidden workloads and ends the episode:
    terminated, end_reason "submitted"; then step gives episode_ended and close keeps the reason."""
    ep = open_episode()
    source, correct = kernel_for(ep)
    ep.ok_step({"type": "write_file", "path": ep.main_file, "content": source})
    body = ep.ok_step({"type": "submit"})
    last = body["observation"]["last"]
    assert last["action"] == "submit"
    ev = check_evaluation(last, body["observation"], hidden_allowed=True)
    if correct:
        assert ev["status"] == "ok", ev.get("message")
    assert body["terminated"] is True and body["truncated"] is False
    assert body["observation"]["done"] is True
    assert body["observation"]["end_reason"] == "submitted" and body["info"]["end_reason"] == "submitted"
    err(ep.step({"type": "compile"}), "episode_ended")
    assert ok(ep.close())["end_reason"] == "submitted"

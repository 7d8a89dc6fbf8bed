"""d2k.KernelEnv and the gymnasium registration against a real server."""
from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import d2k


def test_check_env_passes_on_the_raw_env(server, task_id):
    env = d2k.KernelEnv(task_id, layer=1, endpoint=server.endpoint)
    try:
        check_env(env, skip_close_check=True)  # spec None: also runs the determinism checks
    finally:
        env.close()


def test_gymnasium_make_registered_id(server, task_id, monkeypatch):
    monkeypatch.setenv("D2K_ENDPOINT", server.endpoint)
    ids = d2k.register_envs()
    eid = f"d2k/{task_id}-L2-v0"
    assert eid in ids and f"d2k/{task_id}-L0-v0" in ids
    env = gym.make(eid)
    try:
        check_env(env.unwrapped, skip_close_check=True)
        obs, info = env.reset(seed=1)
        assert info["layer"] == 2 and info["task"] == task_id
        assert len(d2k.parse_observation(obs)["guidance"]) == 2
    finally:
        env.close()
    generic = gym.make("d2k/Kernel-v0", task=task_id, layer=0, endpoint=server.endpoint)
    try:
        obs, _ = generic.reset()
        assert d2k.parse_observation(obs)["guidance"] == []
    finally:
        generic.close()


def test_episode_through_the_env(server, task_id):
    env = d2k.KernelEnv(task_id, layer=3, endpoint=server.endpoint, max_steps=4)
    try:
        obs, info = env.reset(seed=0)
        parsed = d2k.parse_observation(obs)
        main = parsed["task"]["main_file"]
        assert main in parsed["files"] and parsed["last"] is None
        assert info["end_reason"] is None and info["step"] == 0
        obs, reward, term, trunc, info = env.step(
            {"type": "write_file", "path": "bad/../x.cu", "content": "x"})
        assert reward < 0 and info["ok"] is False and info["error"] == "path_violation"
        assert obs in env.observation_space
        obs, reward, term, trunc, info = env.step('{"type": "compile"}')
        assert d2k.parse_observation(obs)["last"]["action"] == "compile"
        assert info["step"] == 2 and not term and not trunc
        obs, reward, term, trunc, info = env.step("this is not json")
        assert info["request_error"] == "invalid_action" and reward == -0.1
        assert info["step"] == 2, "refused client-side: no server step"
        env.step({"type": "write_file", "path": "a.h", "content": ""})
        obs, reward, term, trunc, info = env.step({"type": "write_file", "path": "a.h", "content": "1"})
        assert trunc and not term and info["end_reason"] == "step_budget"
        with pytest.raises(d2k.EpisodeEnded):
            env.step({"type": "compile"})
        old = env.session
        env.reset()
        assert env.session != old
        assert "ansi" in env.metadata["render_modes"]
    finally:
        env.close()


def test_env_without_gpu(server, task_id):
    """Documented behaviour: evaluate → failed step (reward 0), submit → truncated 'no_gpu'."""
    if server.has_gpu:
        pytest.skip("the server has a GPU")
    env = d2k.KernelEnv(task_id, endpoint=server.endpoint)
    try:
        env.reset(seed=0)
        obs, reward, term, trunc, info = env.step({"type": "evaluate"})
        last = d2k.parse_observation(obs)["last"]
        assert last == {"action": "evaluate", "ok": False,
                        "error": {"code": "no_gpu", "message": last["error"]["message"]}}
        assert reward == 0.0 and not term and not trunc and info["request_error"] == "no_gpu"
        obs, reward, term, trunc, info = env.step({"type": "submit"})
        assert trunc and not term and info["end_reason"] == "no_gpu"
    finally:
        env.close()
    strict = d2k.KernelEnv(task_id, endpoint=server.endpoint, request_errors="raise")
    try:
        strict.reset()
        with pytest.raises(d2k.NoGpu):
            strict.step({"type": "evaluate"})
    finally:
        strict.close()


def test_step_before_reset_and_close_releases_session(server, task_id):
    env = d2k.KernelEnv(task_id, endpoint=server.endpoint)
    with pytest.raises(gym.error.ResetNeeded):
        env.step({"type": "compile"})
    env.reset()
    session = env.session
    env.close()
    with d2k.Client(server.endpoint) as c, pytest.raises(d2k.UnknownSession):
        c.observe(session)

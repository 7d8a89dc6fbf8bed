"""d2k.KernelVectorEnv: N episodes pipelined on one socket."""
from __future__ import annotations

import gymnasium as gym
import numpy as np

import d2k


def test_vector_env_steps_and_autoresets(server, task_id):
    env = d2k.KernelVectorEnv(4, task_id, layer=0, endpoint=server.endpoint, max_steps=2)
    try:
        obs, infos = env.reset(seed=10)
        assert obs in env.observation_space
        assert len(set(env.sessions)) == 4
        acts = [{"type": "write_file", "path": f"f{i}.h", "content": str(i)} for i in range(4)]
        obs, rew, term, trunc, infos = env.step(acts)
        assert obs in env.observation_space and rew.tolist() == [0.0] * 4
        assert not term.any() and not trunc.any()
        for i in range(4):
            assert d2k.parse_observation({k: v[i] for k, v in obs.items()})["files"][f"f{i}.h"] == str(i)
        obs, rew, term, trunc, infos = env.step(acts)
        assert trunc.all() and not term.any()
        assert list(infos["end_reason"]) == ["step_budget"] * 4
        before = list(env.sessions)
        obs, rew, term, trunc, infos = env.step(acts)  # NEXT_STEP autoreset: actions ignored
        assert rew.tolist() == [0.0] * 4 and not trunc.any()
        assert all(a != b for a, b in zip(before, env.sessions))
        assert all(d2k.parse_observation({k: v[i] for k, v in obs.items()})["status"]["step"] == 0
                   for i in range(4))
    finally:
        env.close()


def test_vector_env_batched_sample_actions(server, task_id):
    env = d2k.KernelVectorEnv(3, task_id, endpoint=server.endpoint)
    try:
        env.reset(seed=1)
        env.action_space.seed(5)
        obs, rew, term, trunc, infos = env.step(env.action_space.sample())
        assert obs in env.observation_space
        assert rew.shape == (3,) and rew.dtype == np.float64
    finally:
        env.close()


def test_make_vec_uses_the_pipelined_vector_env(server, task_id, monkeypatch):
    monkeypatch.setenv("D2K_ENDPOINT", server.endpoint)
    d2k.register_task(task_id)
    env = gym.make_vec(f"d2k/{task_id}-L1-v0", num_envs=2)
    try:
        assert isinstance(env.unwrapped, d2k.KernelVectorEnv)
        obs, _ = env.reset(seed=0)
        assert len(obs["task"]) == 2
    finally:
        env.close()


def test_make_vec_async_is_quick_and_small(server, task_id, monkeypatch):
    """AsyncVectorEnv (shared memory by default) of 2 envs: seconds and tens of MiB, not 40 s
    and 1 GB (ObservationText keeps its entries as bytes in shared memory)."""
    import time
    from gymnasium.vector.utils import create_shared_memory

    from d2k.spaces import observation_space

    space = observation_space()
    memory = create_shared_memory(space, n=2)
    reserved = sum(len(lengths) * 8 + len(data) for lengths, data in memory.values())
    assert reserved < 80 << 20, f"{reserved} bytes of shared memory for 2 envs"

    monkeypatch.setenv("D2K_ENDPOINT", server.endpoint)
    d2k.register_task(task_id)
    start = time.monotonic()
    env = gym.make_vec(f"d2k/{task_id}-L0-v0", num_envs=2, vectorization_mode="async")
    try:
        obs, _ = env.reset(seed=3)
        assert time.monotonic() - start < 20
        assert len(obs["files"]) == 2 and obs in env.observation_space
        env.action_space.seed(4)
        obs, rew, term, trunc, infos = env.step(env.action_space.sample())
        assert obs in env.observation_space and rew.shape == (2,)
        for i in range(2):
            assert d2k.parse_observation({k: v[i] for k, v in obs.items()})["task"]["id"] == task_id
    finally:
        env.close()

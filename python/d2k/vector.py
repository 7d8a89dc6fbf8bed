"""``d2k.KernelVectorEnv``: N episodes of one task/layer, stepped together.

All N requests of a step (or reset) go out at once on ONE DEALER socket and the replies are
matched by id, so N compiles run in parallel on the server while this process waits once.
Autoreset follows gymnasium's NEXT_STEP mode: after an episode ends, the next step() call
resets that sub-environment (its action is ignored) and returns the first observation with
reward 0.

Observations are batched as gymnasium's ``batch_space`` of the single space: a Dict whose
entries are tuples of N strings. Actions are either the batched Dict (as from
``action_space.sample()``) or a sequence of N single actions (dicts or JSON strings).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate

from .actions import normalize_action
from .client import Client, reset_fields, step_result
from .errors import D2KError, InvalidAction
from .gym_env import OBSERVED_ERRORS, make_info, rejected_step
from .cluster.address import resolve_endpoint
from .local import LocalServer, endpoint_from_environment, open_client
from .spaces import OBS_KEYS, action_space, encode_observation, observation_space


class KernelVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int, task: str, layer: int = 0, *, endpoint: str | None = None,
                 max_steps: int | None = None, max_compiles: int | None = None,
                 max_evaluations: int | None = None, wall_seconds: float | None = None,
                 label: str | None = None, request_errors: str = "observe",
                 invalid_action_reward: float = -0.1, no_gpu_reward: float = 0.0,
                 client: Client | None = None, timeout: float | None = None,
                 max_episode_steps: int | None = None) -> None:
        if num_envs < 1:
            raise ValueError("num_envs must be >= 1")
        if request_errors not in ("observe", "raise"):
            raise ValueError("request_errors must be 'observe' or 'raise'")
        self.num_envs = num_envs
        self.task = task
        self.layer = int(layer)
        self.options = {"max_steps": max_steps if max_steps is not None else max_episode_steps,
                        "max_compiles": max_compiles, "max_evaluations": max_evaluations,
                        "wall_seconds": wall_seconds, "label": label}
        self.request_errors = request_errors
        self.invalid_action_reward = float(invalid_action_reward)
        self.no_gpu_reward = float(no_gpu_reward)
        self._own_client = client is None
        self.server: LocalServer | None = None  # the private server when no endpoint was given
        if client is None:  # a cluster address (ray:...) becomes its router's endpoint
            client, self.server = open_client(resolve_endpoint(endpoint or endpoint_from_environment()), timeout)
        self.client = client
        self.single_observation_space = observation_space()
        self.single_action_space = action_space()
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.sessions: list[str | None] = [None] * num_envs
        self.raw_observations: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        self._seeds: list[int | None] = [None] * num_envs

    # -- helpers ----------------------------------------------------------------------------
    def _batch(self, singles: list[dict[str, str]]) -> dict[str, tuple[str, ...]]:
        return {k: tuple(o[k] for o in singles) for k in OBS_KEYS}

    def _reset_request(self, i: int, seed: int | None, options: dict[str, Any] | None):
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        opts = dict(self.options)
        opts.update(options or {})
        return ("reset", reset_fields(self.task, self.layer, seed, opts))

    def _close_sessions(self, indices: Sequence[int]) -> None:
        reqs = [("close", {"session": self.sessions[i]}) for i in indices if self.sessions[i]]
        for i in indices:
            self.sessions[i] = None
        if reqs:
            # Best effort, like KernelEnv: a session the server already reaped needs no close,
            # and a failed close must not hide the reset that follows.
            self.client.request_many(reqs)

    def _take_reset(self, i: int, reply: dict[str, Any] | D2KError) -> tuple[dict[str, str], dict[str, Any]]:
        if isinstance(reply, D2KError):
            raise reply
        self.sessions[i] = str(reply["session"])
        self.raw_observations[i] = reply.get("observation") or {}
        return (encode_observation(self.raw_observations[i]),
                make_info(self.raw_observations[i], reply.get("info"), self.task, self.layer))

    # -- VectorEnv API ----------------------------------------------------------------------
    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None):
        super().reset(seed=seed if isinstance(seed, int) else None)
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        self._close_sessions(range(self.num_envs))
        replies = self.client.request_many(
            [self._reset_request(i, seeds[i], options) for i in range(self.num_envs)])
        results = [self._take_reset(i, r) for i, r in enumerate(replies)]
        self._needs_reset[:] = False
        infos = self._stack_infos([info for _, info in results])
        return self._batch([obs for obs, _ in results]), infos

    def step(self, actions: Any):
        per_env = self._unbatch(actions)
        obs: list[dict[str, str] | None] = [None] * self.num_envs
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        infos: list[dict[str, Any] | None] = [None] * self.num_envs

        resets = [i for i in range(self.num_envs) if self._needs_reset[i] or self.sessions[i] is None]
        self._close_sessions(resets)
        requests: list[tuple[str, dict[str, Any]]] = []
        plan: list[tuple[int, str, dict[str, Any] | None]] = []
        for i in range(self.num_envs):
            if i in resets:
                requests.append(self._reset_request(i, None, None))
                plan.append((i, "reset", None))
                continue
            try:
                wire = normalize_action(per_env[i])
            except InvalidAction as err:
                if self.request_errors == "raise":
                    raise
                obs[i], rewards[i], truncated[i], infos[i] = self._rejected(i, {"type": None}, err)
                continue
            requests.append(("step", {"session": self.sessions[i], "action": wire}))
            plan.append((i, "step", wire))

        replies = self.client.request_many(requests)
        for (i, kind, wire), reply in zip(plan, replies):
            if kind == "reset":
                obs[i], infos[i] = self._take_reset(i, reply)
                continue
            if isinstance(reply, OBSERVED_ERRORS) and self.request_errors == "observe":
                obs[i], rewards[i], truncated[i], infos[i] = self._rejected(i, wire or {}, reply)
                continue
            if isinstance(reply, D2KError):
                raise reply
            result = step_result(reply)
            self.raw_observations[i] = result.observation
            obs[i] = encode_observation(result.observation)
            rewards[i] = result.reward
            terminated[i] = result.terminated
            truncated[i] = result.truncated
            infos[i] = make_info(result.observation, result.info, self.task, self.layer)
        self._needs_reset = terminated | truncated
        return (self._batch(obs), rewards, terminated, truncated,  # type: ignore[arg-type]
                self._stack_infos(infos))  # type: ignore[arg-type]

    def _rejected(self, i: int, action: dict[str, Any], err: D2KError):
        raw, reward, trunc = rejected_step(self.raw_observations[i], action, err,
                                           self.invalid_action_reward, self.no_gpu_reward)
        info = make_info(raw, None, self.task, self.layer, request_error=err.code)
        return encode_observation(raw), reward, trunc, info

    def _unbatch(self, actions: Any) -> list[Any]:
        if isinstance(actions, dict):
            return list(iterate(self.action_space, actions))
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions, got {len(actions)}")
        return actions

    def _stack_infos(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, info in enumerate(infos):
            out = self._add_info(out, info, i)
        return out

    def close_extras(self, **kwargs: Any) -> None:
        try:
            self._close_sessions(range(self.num_envs))
        finally:
            if self._own_client:
                self.client.close()
            if self.server is not None:
                self.server.stop()
                self.server = None

"""``d2k.KernelEnv``: one d2k episode as a ``gymnasium.Env``.

reset() opens a session on the server (closing the previous one); step() sends one action and
returns (observation, reward, terminated, truncated, info) with the server's reward and end
flags. Spaces and the observation encoding are described in :mod:`d2k.spaces`.

Request-level rejections (no server step consumed) are, by default (``request_errors="observe"``),
returned as a failed step so a training loop keeps going:
  invalid_action, too_large  → reward ``invalid_action_reward`` (-0.1), episode continues;
  no_gpu on evaluate, profile, sanitize → reward ``no_gpu_reward`` (0.0), episode continues;
  no_gpu on submit           → reward ``no_gpu_reward``, truncated=True, end_reason "no_gpu"
                               (a submit can never succeed on that server).
The observation's ``last`` then reads {action, ok: false, error: {code, message}} and
``info["request_error"]`` is the code. With ``request_errors="raise"`` the typed exception
(d2k.NoGpu, d2k.InvalidAction, ...) propagates instead. Every other error always raises.
"""
from __future__ import annotations

from typing import Any, Mapping

import gymnasium as gym
from gymnasium.error import ResetNeeded

from .actions import normalize_action
from .client import Client, StepResult
from .errors import D2KError, InvalidAction, NoGpu, TooLarge
from .cluster.address import resolve_endpoint
from .local import LocalServer, endpoint_from_environment, open_client
from .render import render_text
from .spaces import action_space, encode_observation, observation_space

OBSERVED_ERRORS = (InvalidAction, TooLarge, NoGpu)


def make_info(raw_obs: Mapping[str, Any], server_info: Mapping[str, Any] | None,
              task: str, layer: int, request_error: str | None = None) -> dict[str, Any]:
    """Deterministic info: what the server put in info (end_reason, layer, task), plus the step
    count, whether the last action succeeded and its error code."""
    info: dict[str, Any] = {"task": task, "layer": layer, "end_reason": raw_obs.get("end_reason")}
    for key, value in (server_info or {}).items():
        if key in ("end_reason", "layer", "task") and value is not None:
            info[key] = value
    last = raw_obs.get("last") or {}
    error = last.get("error") if isinstance(last, Mapping) else None
    info["step"] = raw_obs.get("step", 0)
    info["ok"] = bool(last.get("ok", True)) if last else True
    info["error"] = error.get("code") if isinstance(error, Mapping) else None
    if not info["ok"] and info["error"] is None and isinstance(last, Mapping) and last.get("compile"):
        info["error"] = "compile_error"
    info["request_error"] = request_error
    return info


def rejected_step(raw_obs: Mapping[str, Any], action: Mapping[str, Any], err: D2KError,
                  invalid_action_reward: float, no_gpu_reward: float) -> tuple[dict[str, Any], float, bool]:
    """The raw observation, reward and truncation of a request the server refused."""
    obs = dict(raw_obs)
    obs["last"] = {"action": action.get("type"), "ok": False,
                   "error": {"code": err.code, "message": err.message}}
    truncated = False
    if isinstance(err, NoGpu):
        reward = no_gpu_reward
        if action.get("type") == "submit":
            truncated = True
            obs["done"] = True
            obs["end_reason"] = "no_gpu"
    else:
        reward = invalid_action_reward
    return obs, reward, truncated


class KernelEnv(gym.Env[dict, dict]):
    """One d2k task at one guidance layer.

    Args:
        task: task id ("softmax").
        layer: guidance layer 0..3.
        endpoint: address of a running server (``tcp://127.0.0.1:5555``, ``ipc:///tmp/d2k.sock``)
            or of a cluster (its router's endpoint, or ``ray:auto``: d2k.cluster.address);
            default ``$D2K_ENDPOINT``; with neither, the env starts a private ``d2k serve`` on an
            ipc socket (:class:`d2k.LocalServer`) and stops it in close().
        max_steps, max_compiles, max_evaluations, wall_seconds, label: reset options.
        request_errors: "observe" (default) or "raise", see the module doc.
        invalid_action_reward, no_gpu_reward: rewards of refused requests in "observe" mode.
        client: an existing d2k.Client to share (not closed by close()).
        timeout: client-side deadline per request, seconds (default: per-op defaults).
        render_mode: "ansi" (render() returns the text) or "human" (render() prints it): the
            episode's state, the last action's diagnostics and evaluation, the reward and its
            breakdown, the workspace diff since reset.
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(self, task: str, layer: int = 0, *, endpoint: str | None = None,
                 max_steps: int | None = None, max_compiles: int | None = None,
                 max_evaluations: int | None = None, wall_seconds: float | None = None,
                 label: str | None = None, request_errors: str = "observe",
                 invalid_action_reward: float = -0.1, no_gpu_reward: float = 0.0,
                 client: Client | None = None, timeout: float | None = None,
                 render_mode: str | None = None) -> None:
        if request_errors not in ("observe", "raise"):
            raise ValueError("request_errors must be 'observe' or 'raise'")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.task = task
        self.layer = int(layer)
        self.options = {"max_steps": max_steps, "max_compiles": max_compiles,
                        "max_evaluations": max_evaluations, "wall_seconds": wall_seconds,
                        "label": label}
        self.request_errors = request_errors
        self.invalid_action_reward = float(invalid_action_reward)
        self.no_gpu_reward = float(no_gpu_reward)
        self.render_mode = render_mode
        self._own_client = client is None
        self.server: LocalServer | None = None  # the private server when no endpoint was given
        if client is None:
            client, self.server = open_client(resolve_endpoint(endpoint or endpoint_from_environment()), timeout)
        self.client = client
        self.observation_space = observation_space()
        self.action_space = action_space()
        self.session: str | None = None
        self.raw_observation: dict[str, Any] = {}
        self._ended = False
        self._initial_files: dict[str, str] = {}  # the workspace at reset, for render()'s diff
        self._last_reward: float | None = None
        self._last_info: dict[str, Any] = {}
        self._refused: dict[str, Any] | None = None  # the observation of a refused request

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, str], dict[str, Any]]:
        super().reset(seed=seed)
        self._close_session()
        server_seed = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        opts = dict(self.options)
        opts.update(options or {})
        session = self.client.reset(self.task, self.layer, server_seed, **opts)
        self.session = session.id
        self.raw_observation = session.observation
        self._ended = bool(self.raw_observation.get("done"))
        self._initial_files = dict(self.raw_observation.get("files") or {})
        self._last_reward, self._last_info, self._refused = None, dict(session.info or {}), None
        return (encode_observation(self.raw_observation),
                make_info(self.raw_observation, session.info, self.task, self.layer))

    def step(self, action: Any) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        if self.session is None:
            raise ResetNeeded("call reset() before step()")
        try:
            wire_action = normalize_action(action)
        except InvalidAction as err:  # not even sendable: refused on this side
            return self._rejected({"type": None}, err)
        try:
            result = self.client.step(self.session, wire_action)
        except OBSERVED_ERRORS as err:
            return self._rejected(wire_action, err)
        return self._accept(result)

    def _rejected(self, action: Mapping[str, Any], err: D2KError
                  ) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        if self.request_errors == "raise":
            raise err
        raw, reward, truncated = rejected_step(self.raw_observation, action, err,
                                               self.invalid_action_reward, self.no_gpu_reward)
        self._ended = self._ended or truncated
        info = make_info(raw, None, self.task, self.layer, request_error=err.code)
        self._last_reward, self._last_info, self._refused = reward, {}, raw  # for render()
        return encode_observation(raw), reward, False, truncated, info

    def _accept(self, result: StepResult) -> tuple[dict[str, str], float, bool, bool, dict[str, Any]]:
        self.raw_observation = result.observation
        self._ended = result.done
        self._last_reward, self._last_info = result.reward, dict(result.info or {})
        self._refused = None
        info = make_info(result.observation, result.info, self.task, self.layer)
        return (encode_observation(result.observation), result.reward, result.terminated,
                result.truncated, info)

    def render(self) -> str | None:
        if self.render_mode is None:
            return None
        text = render_text(task=self.task, layer=self.layer, session=self.session,
                           observation=self._refused or self.raw_observation, initial_files=self._initial_files,
                           reward=self._last_reward, info=self._last_info)
        if self.render_mode == "human":
            print(text, end="", flush=True)
            return None
        return text

    def close(self) -> None:
        try:
            self._close_session()
        finally:
            if self._own_client:
                self.client.close()
            if self.server is not None:
                self.server.stop()
                self.server = None
        super().close()

    # -- helpers ----------------------------------------------------------------------------
    def _close_session(self) -> None:
        if self.session is None:
            return
        session, self.session = self.session, None
        try:
            self.client.close_session(session)
        except D2KError:
            pass  # already reaped or the server is gone: nothing left to free

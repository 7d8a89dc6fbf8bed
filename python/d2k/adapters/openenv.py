"""An OpenEnv-compatible server for d2k (``pip install 'd2k[openenv]'``, package ``openenv-core``).

    python -m d2k.adapters.openenv --endpoint tcp://127.0.0.1:5555 --task softmax --layer 2 --port 8000
    # or, in code: app = d2k.adapters.openenv.make_app(endpoint=..., task="softmax", layer=2)

It is OpenEnv's own FastAPI server (``openenv.core.env_server.http_server.create_app``) around
:class:`D2KEnvironment`, so OpenEnv's clients (``openenv.core.GenericEnvClient``, an ``EnvClient``
subclass, TRL's OpenEnv integration) speak to it unchanged:

* **WebSocket** ``/ws`` (what ``EnvClient`` uses): one ``D2KEnvironment`` per connection, one d2k
  session per ``reset``, closed when the connection ends. Up to ``max_concurrent_envs`` at once.
* **HTTP** ``POST /reset``, ``POST /step``, ``GET /state``: OpenEnv's HTTP endpoints make a new
  environment per request. To keep a d2k episode across HTTP requests, name it: ``/reset`` with
  ``{"episode_id": "e1"}`` opens a d2k session kept under that name (until ``/reset`` names it
  again, an action ``{"type": "close"}`` or the server's idle timeout), and ``/step`` with
  ``{"action": {"type": "compile", "episode_id": "e1"}}`` steps it. Without a name, an HTTP
  ``/reset`` returns the first observation and ends the episode (OpenEnv's stateless HTTP).

Actions are d2k's (protocol/PROTOCOL.md section 8): ``{"type": "write_file", "path", "content"}``,
``edit`` (path, old, new), ``patch`` (diff), ``compile``, ``evaluate``, ``submit``. The
observation carries d2k's observation (``task``, ``files``, ``last``, ``status``...), the reward
and ``done`` are d2k's. A request d2k refuses without taking a step (invalid action, too large,
no GPU) comes back as a failed step (``last.ok`` false, reward -0.1 or 0.0), as in KernelEnv.
The endpoint may be a ``d2k serve``, a cluster router or a ``ray:`` cluster address.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Optional

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from ..client import Client
from ..cluster.address import resolve_endpoint
from ..errors import D2KError, InvalidAction, NoGpu, TooLarge
from ..gym_env import rejected_step

REFUSED = (InvalidAction, TooLarge, NoGpu)
MAX_NAMED = 10_000  # named HTTP episodes remembered at once


class D2KAction(Action):
    """One d2k action (protocol/PROTOCOL.md section 8), plus ``close`` and ``episode_id`` (HTTP)."""

    type: str = Field(..., description="write_file, edit, patch, compile, evaluate, submit (or close)")
    path: Optional[str] = Field(default=None, description="workspace file (write_file, edit)")
    content: Optional[str] = Field(default=None, description="the new file's text (write_file)")
    old: Optional[str] = Field(default=None, description="text to replace, exactly once (edit)")
    new: Optional[str] = Field(default=None, description="replacement text (edit)")
    diff: Optional[str] = Field(default=None, description="a unified diff (patch)")
    episode_id: Optional[str] = Field(default=None, description="HTTP only: the named episode to step")

    def wire(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(exclude={"metadata", "episode_id"}).items()
                if v is not None}


class D2KObservation(Observation):
    """d2k's observation (section 9) with its reward and end flags."""

    session: str = Field(default="", description="the d2k session id (the OpenEnv episode id)")
    task: dict[str, Any] = Field(default_factory=dict, description="statement, signature, workloads")
    guidance: list[Any] = Field(default_factory=list, description="guidance texts of the layer")
    files: dict[str, str] = Field(default_factory=dict, description="the workspace")
    last: Optional[dict[str, Any]] = Field(default=None, description="outcome of the last action")
    status: dict[str, Any] = Field(default_factory=dict, description="layer, step, budget, done, end_reason")
    info: dict[str, Any] = Field(default_factory=dict, description="d2k's info: end_reason, reward breakdown")
    truncated: bool = Field(default=False, description="the episode was cut off (budget, wall time)")


class D2KState(State):
    task: str = ""
    layer: int = 0
    end_reason: Optional[str] = None
    total_reward: float = 0.0


class _Shared:
    """What every environment of one app shares: the endpoint, defaults, named HTTP episodes."""

    def __init__(self, endpoint: str | None, task: str, layer: int, options: dict[str, Any]) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.task, self.layer, self.options = task, int(layer), dict(options)
        # HTTP episodes by name -> (session, observation, state); at most MAX_NAMED, oldest dropped
        # (its d2k session is left to the server's idle timeout).
        self.named: collections.OrderedDict[str, tuple[str, dict[str, Any], D2KState]] = collections.OrderedDict()
        self.lock = threading.Lock()


def _observation(raw: dict[str, Any], info: dict[str, Any], session: str, reward: float,
                 done: bool, truncated: bool = False) -> D2KObservation:
    status = {k: raw.get(k) for k in ("layer", "step", "budget", "done", "end_reason") if k in raw}
    return D2KObservation(session=session, task=dict(raw.get("task") or {}),
                          guidance=list(raw.get("guidance") or []), files=dict(raw.get("files") or {}),
                          last=raw.get("last"), status=status, info=dict(info or {}),
                          truncated=truncated, reward=reward, done=done)


class D2KEnvironment(Environment):
    """One OpenEnv environment instance: at most one d2k session it owns at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, shared: _Shared) -> None:
        super().__init__()
        self.shared = shared
        self._client: Client | None = None   # per instance: Client is not thread-safe
        self.session: str | None = None
        self.raw: dict[str, Any] = {}
        self._state = D2KState(task=shared.task, layer=shared.layer)

    def _c(self) -> Client:
        if self._client is None:
            self._client = Client(self.shared.endpoint)
        return self._client

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              task: Optional[str] = None, layer: Optional[int] = None, **kwargs: Any) -> D2KObservation:
        self._close_owned()
        task = task or self.shared.task
        layer = self.shared.layer if layer is None else int(layer)
        options = {k: v for k, v in self.shared.options.items() if v is not None}
        session = self._c().reset(task, layer, seed, **options)
        state = D2KState(episode_id=episode_id or session.id, step_count=0, task=task, layer=layer)
        if episode_id is not None:  # HTTP: kept under its name, not owned by this instance
            with self.shared.lock:
                old = self.shared.named.pop(episode_id, None)
                self.shared.named[episode_id] = (session.id, session.observation, state)
                while len(self.shared.named) > MAX_NAMED:
                    self.shared.named.popitem(last=False)
            if old is not None:
                self._quiet_close(old[0])
        else:
            self.session, self.raw, self._state = session.id, session.observation, state
        return _observation(session.observation, session.info, session.id, 0.0,
                            bool(session.observation.get("done")))

    def step(self, action: D2KAction, timeout_s: Optional[float] = None, **kwargs: Any) -> D2KObservation:
        if action.episode_id is not None:
            with self.shared.lock:
                named = self.shared.named.get(action.episode_id)
            if named is None:
                raise ValueError(f"no episode named {action.episode_id!r}: /reset it first")
            session, raw, state = named
        else:
            if self.session is None:
                raise ValueError("reset() before step()")
            session, raw, state = self.session, self.raw, self._state
        if action.type == "close":
            reply = self._c().close_session(session)
            if action.episode_id is not None:
                with self.shared.lock:
                    self.shared.named.pop(action.episode_id, None)
            else:
                self.session = None
            state.end_reason = reply.get("end_reason")
            return _observation(raw, {"end_reason": reply.get("end_reason")}, session, 0.0, True)
        try:
            result = self._c().step(session, action.wire())
        except REFUSED as err:
            refused, reward, truncated = rejected_step(raw, action.wire(), err, -0.1, 0.0)
            return _observation(refused, {"request_error": err.code}, session, reward,
                                truncated, truncated)
        state.step_count += 1
        state.total_reward += result.reward
        state.end_reason = result.info.get("end_reason") or result.observation.get("end_reason")
        if action.episode_id is not None:
            with self.shared.lock:
                if action.episode_id in self.shared.named:
                    self.shared.named[action.episode_id] = (session, result.observation, state)
        else:
            self.raw = result.observation
        return _observation(result.observation, result.info, session, result.reward,
                            result.done, result.truncated)

    @property
    def state(self) -> D2KState:
        return self._state

    def _quiet_close(self, session: str) -> None:
        try:
            self._c().close_session(session)
        except D2KError:
            pass

    def _close_owned(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            self._quiet_close(session)

    def close(self) -> None:
        try:
            self._close_owned()
        finally:
            if self._client is not None:
                self._client.close()
                self._client = None


def make_app(endpoint: str | None = None, task: str = "vector_add", layer: int = 0, *,
             max_concurrent_envs: int = 64, **options: Any):
    """OpenEnv's FastAPI app serving d2k episodes of ``task`` at ``layer`` (reset may choose
    another with ``{"task": ..., "layer": ...}``); options are d2k reset options (max_steps...)."""
    shared = _Shared(endpoint, task, layer, options)
    return create_app(lambda: D2KEnvironment(shared), D2KAction, D2KObservation, env_name="d2k",
                      max_concurrent_envs=max_concurrent_envs)


def main(argv: list[str] | None = None) -> int:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description="OpenEnv-compatible HTTP/WebSocket server for d2k")
    parser.add_argument("--endpoint", default=None, help="d2k server, router or ray: address")
    parser.add_argument("--task", default="vector_add")
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-concurrent-envs", type=int, default=64)
    args = parser.parse_args(argv)
    uvicorn.run(make_app(args.endpoint, args.task, args.layer,
                         max_concurrent_envs=args.max_concurrent_envs), host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

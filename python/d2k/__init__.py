"""d2k: Python client of the d2k-gym server, with a gymnasium environment.

    import gymnasium as gym, d2k
    env = gym.make("d2k/softmax-L2-v0")          # a private server, or the one at $D2K_ENDPOINT
    env = d2k.make("softmax", layer=2)           # the same without gymnasium's registry
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step({"type": "compile"})
"""
from __future__ import annotations

from . import actions
from .actions import ACTION_TYPES, normalize_action
from .aio import AsyncClient, AsyncSession
from .client import Client, RetryPolicy, Session, StepResult
from .errors import (BadRequest, Busy, BudgetExhausted, Capacity, ClientTimeout, D2KError,
                     EpisodeEnded, Internal, InvalidAction, NoGpu, PathViolation, ProtocolError,
                     SandboxViolation, ServerLost, ShuttingDown, StorageUnavailable, Timeout, TooLarge, UnknownOp, UnknownSession,
                     UnknownTask, VersionMismatch, error_from_reply)
from .gym_env import KernelEnv
from .local import LocalServer, ServerNotFound, ServerStartError, find_server_binary
from .registration import env_id, register_envs, register_task
from .spaces import parse_observation
from .vector import KernelVectorEnv
from .wire import DEFAULT_ENDPOINT, PROTOCOL_VERSION

__version__ = "0.1.0"


def make(task: str, layer: int = 0, **kwargs) -> KernelEnv:
    """A :class:`KernelEnv` for one task and guidance layer; keyword arguments as KernelEnv's.

    Without ``endpoint=`` (and without ``$D2K_ENDPOINT``) it starts a private ``d2k serve`` on
    an ipc socket, stopped by ``env.close()``.
    """
    return KernelEnv(task, layer, **kwargs)


from .registration import register_defaults as _register_defaults

_register_defaults()

__all__ = [
    "ACTION_TYPES", "AsyncClient", "AsyncSession", "BadRequest", "Busy", "BudgetExhausted",
    "Capacity", "Client", "ClientTimeout", "D2KError", "DEFAULT_ENDPOINT", "EpisodeEnded",
    "Internal", "InvalidAction", "KernelEnv", "KernelVectorEnv", "LocalServer", "NoGpu",
    "PROTOCOL_VERSION", "ServerNotFound", "ServerStartError", "find_server_binary", "make",
    "PathViolation", "ProtocolError", "RetryPolicy", "SandboxViolation", "ServerLost", "Session",
    "ShuttingDown", "StepResult", "StorageUnavailable", "Timeout", "TooLarge", "UnknownOp", "UnknownSession",
    "UnknownTask", "VersionMismatch", "actions", "env_id", "error_from_reply",
    "normalize_action", "parse_observation", "register_envs", "register_task",
]

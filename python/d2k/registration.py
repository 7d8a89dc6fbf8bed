"""Gymnasium ids ``d2k/<task>-L<k>-v0``.

Gymnasium looks ids up in a plain dict, so they must be registered before ``gymnasium.make``.
``import d2k`` registers:
  * ``d2k/Kernel-v0``: any task, ``gymnasium.make("d2k/Kernel-v0", task="softmax", layer=2)``;
  * ``d2k/<task>-L{0..3}-v0`` for every task folder (a subfolder with task.json) of the default
    tasks: ``$D2K_TASKS_DIR``, else the tasks bundled in the installed package (``d2k/tasks``,
    put there by ``pip install ./python``), else the checkout's ``tasks/`` when the package runs
    from a source tree.
``d2k.register_envs()`` asks a running server (``$D2K_ENDPOINT``) for its tasks and registers
an id for every task × layer it lists. Envs made without ``endpoint=`` connect to
``$D2K_ENDPOINT`` when set, else start a private server (d2k.local).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from gymnasium.envs.registration import register, registry

NAMESPACE = "d2k"
ENTRY_POINT = "d2k.gym_env:KernelEnv"
VECTOR_ENTRY_POINT = "d2k.vector:KernelVectorEnv"


def env_id(task: str, layer: int) -> str:
    return f"{NAMESPACE}/{task}-L{int(layer)}-v0"


def register_task(task: str, layers: Iterable[int] = (0, 1, 2, 3)) -> list[str]:
    ids = []
    for layer in layers:
        eid = env_id(task, layer)
        if eid not in registry:
            register(id=eid, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT,
                     kwargs={"task": task, "layer": int(layer)},
                     nondeterministic=True)  # GPU timings vary from run to run
        ids.append(eid)
    return ids


def register_envs(endpoint: str | None = None, timeout: float = 10.0) -> list[str]:
    """Registers ``d2k/<task>-L<k>-v0`` for every task and layer the server lists."""
    from .client import Client

    with Client(endpoint, timeout=timeout) as client:
        tasks = client.list_tasks()
    ids: list[str] = []
    for t in tasks:
        ids += register_task(str(t["id"]), [int(k) for k in t.get("layers", (0, 1, 2, 3))])
    return ids


def tasks_in_dir(root: Path) -> list[str]:
    """Task ids of the task folders under root (the id field of task.json, else the folder)."""
    found = []
    if not root.is_dir():
        return found
    for sub in sorted(root.iterdir()):
        manifest = sub / "task.json"
        if not manifest.is_file():
            continue
        try:
            task_id = json.loads(manifest.read_text(encoding="utf-8")).get("id") or sub.name
        except (OSError, ValueError, AttributeError):
            task_id = sub.name  # the server reports broken tasks; registering the id is harmless
        found.append(str(task_id))
    return found


def default_tasks_dir() -> Path | None:
    """$D2K_TASKS_DIR; else the tasks bundled in the installed package; else the checkout's."""
    env = os.environ.get("D2K_TASKS_DIR")
    if env:
        return Path(env)
    package = Path(__file__).resolve().parent
    for candidate in (package / "tasks",               # installed: site-packages/d2k/tasks
                      package.parents[1] / "tasks"):   # checkout: <repo>/python/d2k → <repo>/tasks
        if candidate.is_dir() and tasks_in_dir(candidate):
            return candidate
    return None


def register_defaults() -> None:
    if "d2k/Kernel-v0" not in registry:
        register(id="d2k/Kernel-v0", entry_point=ENTRY_POINT,
                 vector_entry_point=VECTOR_ENTRY_POINT, nondeterministic=True)
    root = default_tasks_dir()
    if root is not None:
        for task in tasks_in_dir(root):
            register_task(task)

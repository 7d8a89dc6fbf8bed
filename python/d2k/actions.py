"""Builders for the actions of protocol v1 (six for the workspace and the kernel, three tools), and
one normaliser for user-given actions."""
from __future__ import annotations

import json
from typing import Any, Mapping

from .errors import InvalidAction

# New types are appended, so the indices of a Discrete action space stay what they were.
ACTION_TYPES: tuple[str, ...] = (
    "write_file", "edit", "patch", "compile", "evaluate", "submit", "profile", "sanitize", "disassemble")

PROFILE_SECTIONS: tuple[str, ...] = (
    "speed_of_light", "memory", "compute", "occupancy", "launch", "warp_stalls")
SANITIZER_TOOLS: tuple[str, ...] = ("memcheck", "racecheck", "initcheck", "synccheck")

# Fields each action type carries on the wire (strings, but profile.sections: a list of strings,
# disassemble.sass/ptx: booleans, disassemble.max_bytes: an integer).
ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "write_file": ("path", "content"),
    "edit": ("path", "old", "new"),
    "patch": ("diff",),
    "compile": (),
    "evaluate": (),
    "submit": (),
    "profile": ("workload", "sections"),
    "sanitize": ("workload", "tool"),
    "disassemble": ("kernel", "sass", "ptx", "max_bytes"),
}


def write_file(path: str, content: str) -> dict[str, Any]:
    return {"type": "write_file", "path": path, "content": content}


def edit(path: str, old: str, new: str) -> dict[str, Any]:
    return {"type": "edit", "path": path, "old": old, "new": new}


def patch(diff: str) -> dict[str, Any]:
    return {"type": "patch", "diff": diff}


def compile() -> dict[str, Any]:  # noqa: A001 - the action's name on the wire
    return {"type": "compile"}


def evaluate() -> dict[str, Any]:
    return {"type": "evaluate"}


def submit() -> dict[str, Any]:
    return {"type": "submit"}


def profile(workload: str | None = None, sections: list[str] | None = None) -> dict[str, Any]:
    """Nsight Compute on one visible workload (default: the largest); sections from PROFILE_SECTIONS."""
    out: dict[str, Any] = {"type": "profile"}
    if workload:
        out["workload"] = workload
    if sections:
        out["sections"] = list(sections)
    return out


def sanitize(tool: str = "memcheck", workload: str | None = None) -> dict[str, Any]:
    """compute-sanitizer (a tool of SANITIZER_TOOLS) on one visible workload (default: the smallest)."""
    out: dict[str, Any] = {"type": "sanitize", "tool": tool}
    if workload:
        out["workload"] = workload
    return out


def disassemble(kernel: str | None = None, *, sass: bool = True, ptx: bool = False,
                max_bytes: int | None = None) -> dict[str, Any]:
    """SASS (and PTX) of the kernels whose name contains ``kernel``, with their resource counts."""
    out: dict[str, Any] = {"type": "disassemble", "sass": sass, "ptx": ptx}
    if kernel:
        out["kernel"] = kernel
    if max_bytes is not None:
        out["max_bytes"] = int(max_bytes)
    return out


def normalize_action(action: Any) -> dict[str, Any]:
    """Turns what a user or a policy produced into a wire action map.

    Accepts a map with ``type`` as a name ("edit") or as an index into :data:`ACTION_TYPES`
    (what ``KernelEnv.action_space.sample()`` gives), or a JSON string of such a map. Keeps only
    the fields of that type, so a Dict-space sample sends just what its type needs. Raises
    :class:`InvalidAction` (client side, nothing sent) for anything else.
    """
    if isinstance(action, (str, bytes)):
        try:
            action = json.loads(action)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidAction(f"action is not valid JSON: {exc}", field="action") from None
    if not isinstance(action, Mapping):
        raise InvalidAction(f"action must be a map, got {type(action).__name__}", field="action")
    kind = action.get("type")
    if not isinstance(kind, str):
        try:  # numpy integers from a Discrete space, plain ints
            index = int(kind)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InvalidAction("action.type must be a name or an index", field="action.type") from None
        if not 0 <= index < len(ACTION_TYPES) or isinstance(kind, bool):
            raise InvalidAction(f"action.type index {index} out of range", field="action.type")
        kind = ACTION_TYPES[index]
    if kind not in ACTION_FIELDS:
        # Unknown names go to the server unchanged: it is the judge of what exists.
        return {str(k): v for k, v in action.items()}
    out: dict[str, Any] = {"type": kind}
    for name in ACTION_FIELDS[kind]:
        if name in action:
            out[name] = action[name]  # types are the server's to check (invalid_action)
    # A Dict-space sample carries the tools' options as text and integers: sections as one
    # comma/space-separated string, sass/ptx as 0/1 (an empty name means the server's default).
    if kind == "profile" and isinstance(out.get("sections"), str):
        out["sections"] = [s for s in out["sections"].replace(",", " ").split() if s]
    if kind == "disassemble":
        for flag in ("sass", "ptx"):
            if flag in out and not isinstance(out[flag], bool):
                try:
                    out[flag] = bool(int(out[flag]))
                except (TypeError, ValueError):
                    pass  # the server's to refuse (invalid_action)
        if "max_bytes" in out and not isinstance(out["max_bytes"], (bool, str)):
            try:
                out["max_bytes"] = int(out["max_bytes"])
            except (TypeError, ValueError):
                pass
    return out

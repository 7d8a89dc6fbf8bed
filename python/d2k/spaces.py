"""Gymnasium spaces of KernelEnv and the mapping from server observations to them.

Observation: a Dict of five Text entries, each a JSON document written with sorted keys and
ASCII escapes, so every character is printable ASCII and equal states give equal strings:
  task      {id, title, category, statement, signature, entry, main_file, workloads}
  guidance  [{layer, title, text}] for L1..Lk (``[]`` at L0)
  files     {path: content} of the workspace
  last      the last action's outcome (``null`` before the first step)
  status    {layer, step, budget, done, end_reason}
Wall-clock fields (``seconds``, ``seconds_used``) and the compile cache flag are left out of these
strings so the same actions give the same observation; the server's full observation is
``env.raw_observation``. :func:`parse_observation` turns the strings back into Python values.

Action: a Dict {type: Discrete(6) over ACTION_TYPES, path, content, old, new, diff: Text};
only the fields of the chosen type are sent. ``step`` also takes a plain dict with
``type`` as a name, or a JSON string of one.
"""
from __future__ import annotations

import json
import string
from typing import Any, Mapping

from gymnasium import spaces

from .actions import ACTION_TYPES

PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
SOURCE_CHARS = PRINTABLE + "\n\t"
PATH_CHARS = string.ascii_letters + string.digits + "._-/"

OBS_KEYS: tuple[str, ...] = ("task", "guidance", "files", "last", "status")
MAX_OBS_CHARS = 1 << 24      # a whole workspace (2 MiB) JSON-escaped fits easily
MAX_FILE_CHARS = 256 << 10   # protocol limit of one workspace file
MAX_STRING_CHARS = 1 << 20   # protocol limit of one string (a diff)
MAX_PATH_CHARS = 128

# Fields that differ between two runs of the same actions: kept out of the Text observation.
VOLATILE_KEYS = frozenset({"seconds", "seconds_used", "cached"})


def observation_space() -> spaces.Dict:
    return spaces.Dict({k: spaces.Text(max_length=MAX_OBS_CHARS, min_length=1, charset=PRINTABLE)
                        for k in OBS_KEYS})


def action_space() -> spaces.Dict:
    return spaces.Dict({
        "type": spaces.Discrete(len(ACTION_TYPES)),
        "path": spaces.Text(max_length=MAX_PATH_CHARS, min_length=1, charset=PATH_CHARS),
        "content": spaces.Text(max_length=MAX_FILE_CHARS, min_length=0, charset=SOURCE_CHARS),
        "old": spaces.Text(max_length=MAX_FILE_CHARS, min_length=1, charset=SOURCE_CHARS),
        "new": spaces.Text(max_length=MAX_FILE_CHARS, min_length=0, charset=SOURCE_CHARS),
        "diff": spaces.Text(max_length=MAX_STRING_CHARS, min_length=1, charset=SOURCE_CHARS),
    })


def strip_volatile(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): strip_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, (list, tuple)):
        return [strip_volatile(v) for v in value]
    return value


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"),
                      default=repr)


def encode_observation(raw: Mapping[str, Any]) -> dict[str, str]:
    """Server observation → the Dict-of-Text observation (fresh strings every call)."""
    task = raw.get("task") or {}
    status = {
        "layer": raw.get("layer"),
        "step": raw.get("step"),
        "budget": raw.get("budget") or {},
        "done": bool(raw.get("done", False)),
        "end_reason": raw.get("end_reason"),
    }
    return {
        "task": _dump(task),
        "guidance": _dump(raw.get("guidance") or []),
        "files": _dump(raw.get("files") or {}),
        "last": _dump(strip_volatile(raw.get("last"))),
        "status": _dump(strip_volatile(status)),
    }


def parse_observation(obs: Mapping[str, str]) -> dict[str, Any]:
    """The Dict-of-Text observation → Python values (the JSON of each entry, decoded)."""
    return {k: json.loads(v) for k, v in obs.items()}

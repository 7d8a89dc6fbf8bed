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

Action: a Dict {type: Discrete(9) over ACTION_TYPES, path, content, old, new, diff, workload,
sections, tool, kernel: Text, sass, ptx: Discrete(2), max_bytes: Discrete(65536, start=1)}; only
the fields of the chosen type are sent (``sections`` is a comma- or space-separated list; an empty
workload, tool or kernel means the server's default). ``step`` also takes a plain dict with
``type`` as a name, or a JSON string of one.
"""
from __future__ import annotations

import json
import string
from collections.abc import Sequence
from typing import Any, Mapping

from gymnasium import spaces

from .actions import ACTION_TYPES

PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
SOURCE_CHARS = PRINTABLE + "\n\t"
NAME_CHARS = string.ascii_letters + string.digits + "_"
PATH_CHARS = string.ascii_letters + string.digits + "._-/"

OBS_KEYS: tuple[str, ...] = ("task", "guidance", "files", "last", "status")
MAX_OBS_CHARS = 1 << 24      # a whole workspace (2 MiB) JSON-escaped fits easily
# Per entry: what each can hold (a task statement and its guidance are a few KiB; the workspace
# and the last outcome, with its compile log, can be large). gymnasium.vector.AsyncVectorEnv
# reserves max_length bytes per entry and env in shared memory (see ObservationText).
OBS_MAX_CHARS: dict[str, int] = {"task": 1 << 20, "guidance": 1 << 20, "files": MAX_OBS_CHARS,
                                 "last": MAX_OBS_CHARS, "status": 1 << 16}
MAX_FILE_CHARS = 256 << 10   # protocol limit of one workspace file
MAX_STRING_CHARS = 1 << 20   # protocol limit of one string (a diff)
MAX_PATH_CHARS = 128

# Fields that differ between two runs of the same actions: kept out of the Text observation.
VOLATILE_KEYS = frozenset({"seconds", "seconds_used", "cached"})


class ObservationText(spaces.Text):
    """A Text entry of the observation: printable ASCII JSON.

    gymnasium's shared memory for a Text space (AsyncVectorEnv's default) holds one int32 per
    character of max_length and is read back one character at a time in Python: for these
    entries hundreds of MiB and tens of seconds per env. An ObservationText is kept in shared
    memory as ASCII bytes with a length per env instead (handlers registered below).
    """


def observation_space() -> spaces.Dict:
    return spaces.Dict({k: ObservationText(max_length=OBS_MAX_CHARS[k], min_length=1, charset=PRINTABLE)
                        for k in OBS_KEYS})


class SharedTextBatch(Sequence):
    """N strings in shared memory (ObservationText's layout), decoded when read. A deep copy
    (what AsyncVectorEnv returns with its default copy=True) is a plain tuple of str."""

    def __init__(self, lengths: Any, data: Any, max_length: int, n: int) -> None:
        self._lengths, self._data, self._max, self._n = lengths, data, max_length, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        import numpy as np
        start = index * self._max
        raw = np.frombuffer(self._data, dtype=np.uint8)[start:start + self._lengths[index]]
        return raw.tobytes().decode("ascii")

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return repr(tuple(self))


def _register_shared_memory() -> None:
    import numpy as np
    from gymnasium.vector.utils import shared_memory as shm

    @shm.create_shared_memory.register(ObservationText)
    def _create(space: ObservationText, n: int = 1, ctx: Any = None):
        import multiprocessing as mp
        ctx = ctx or mp
        return (ctx.Array("q", n), ctx.Array("B", n * space.max_length, lock=False))

    @shm.read_from_shared_memory.register(ObservationText)
    def _read(space: ObservationText, memory: Any, n: int = 1) -> "SharedTextBatch":
        # AsyncVectorEnv reads its shared memory ONCE and expects views that show later writes
        # (numpy arrays do); strings cannot, so this is a view that decodes on access.
        lengths, data = memory
        return SharedTextBatch(lengths, data, space.max_length, n)

    @shm.write_to_shared_memory.register(ObservationText)
    def _write(space: ObservationText, index: int, value: str, memory: Any) -> None:
        lengths, data = memory
        raw = value.encode("ascii")
        if len(raw) > space.max_length:
            raise ValueError(f"observation entry of {len(raw)} characters is over {space.max_length}")
        start = index * space.max_length
        np.frombuffer(data, dtype=np.uint8)[start:start + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        lengths[index] = len(raw)


_register_shared_memory()


def action_space() -> spaces.Dict:
    return spaces.Dict({
        "type": spaces.Discrete(len(ACTION_TYPES)),
        "path": spaces.Text(max_length=MAX_PATH_CHARS, min_length=1, charset=PATH_CHARS),
        "content": spaces.Text(max_length=MAX_FILE_CHARS, min_length=0, charset=SOURCE_CHARS),
        "old": spaces.Text(max_length=MAX_FILE_CHARS, min_length=1, charset=SOURCE_CHARS),
        "new": spaces.Text(max_length=MAX_FILE_CHARS, min_length=0, charset=SOURCE_CHARS),
        "diff": spaces.Text(max_length=MAX_STRING_CHARS, min_length=1, charset=SOURCE_CHARS),
        # The tools (profile, sanitize, disassemble): names, so short printable text.
        "workload": spaces.Text(max_length=64, min_length=0, charset=NAME_CHARS),
        "sections": spaces.Text(max_length=128, min_length=0, charset=NAME_CHARS + ", "),
        "tool": spaces.Text(max_length=16, min_length=0, charset=NAME_CHARS),
        "kernel": spaces.Text(max_length=256, min_length=0, charset=PRINTABLE),
        "sass": spaces.Discrete(2),
        "ptx": spaces.Discrete(2),
        "max_bytes": spaces.Discrete(1 << 16, start=1),
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

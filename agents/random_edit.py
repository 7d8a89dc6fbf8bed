"""Random-edit agent: seeded random writes, edits, patches and compiles on the workspace. It
exercises the failure paths (bad paths, edits that do not apply, diffs that do not apply,
compile errors) as much as the successes; with --evaluate it also evaluates (GPU servers)."""
from __future__ import annotations

import difflib
import random
import sys

import d2k

from .common import EpisodeResult, base_parser, describe, run_episodes

BAD_PATHS = ["../escape.cu", "/etc/passwd.cu", "a//b.cu", "x.py", "d1/d2/d3/d4/d5/deep.cu",
             "sp ace.cu", ""]
JUNK = ["}", "{", ";", "int x = ;", "__global__", "#include <nonexistent.h>", "/*", "0xZZ"]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True) or ["\n"]
    i = rng.randrange(len(lines))
    choice = rng.randrange(4)
    if choice == 0:
        del lines[i]
    elif choice == 1:
        lines.insert(i, lines[i])
    elif choice == 2:
        lines.insert(i, rng.choice(JUNK) + "\n")
    else:
        lines[i] = lines[i].replace(" ", "  ", 1) if " " in lines[i] else "// " + lines[i]
    return "".join(lines)


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True),
                                        after.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def random_action(obs: dict, rng: random.Random, evaluate: bool) -> dict:
    files = obs.get("files") or {}
    main = (obs.get("task") or {}).get("main_file", "kernel.cu")
    path = rng.choice(sorted(files)) if files else main
    text = files.get(path, "")
    kinds = ["write_file", "edit", "patch", "compile", "compile", "bad_path", "bad_edit",
             "bad_patch"] + (["evaluate"] if evaluate else [])
    kind = rng.choice(kinds)
    if kind == "write_file":
        return d2k.actions.write_file(path, mutate(text, rng))
    if kind == "edit" and text.strip():
        line = rng.choice([ln for ln in text.splitlines() if ln.strip()] or [text])
        return d2k.actions.edit(path, line, line + " // edited")
    if kind == "patch":
        diff = unified_diff(path, text, mutate(text, rng))
        return d2k.actions.patch(diff) if diff else d2k.actions.compile()
    if kind == "bad_path":
        return d2k.actions.write_file(rng.choice(BAD_PATHS), "int x;\n")
    if kind == "bad_edit":
        return d2k.actions.edit(path, f"text that is not there {rng.random()}", "x")
    if kind == "bad_patch":
        return d2k.actions.patch(f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,1 @@\n-no such line\n+x\n")
    if kind == "evaluate":
        return d2k.actions.evaluate()
    return d2k.actions.compile()


def main(argv: list[str] | None = None) -> int:
    p = base_parser("random_edit", describe(__doc__))
    p.add_argument("--actions", type=int, default=12, help="actions per episode (default 12)")
    p.add_argument("--evaluate", action="store_true", help="also choose evaluate (GPU servers)")
    args = p.parse_args(argv)

    def play(session: d2k.Session, res: EpisodeResult, gpu: bool) -> None:
        rng = random.Random(args.seed * 1_000_003 + res.episode)
        for _ in range(args.actions):
            if session.done:
                break
            action = random_action(session.observation, rng, args.evaluate and gpu)
            try:
                res.take(session.step(action))
            except (d2k.InvalidAction, d2k.TooLarge, d2k.NoGpu) as err:  # refused, no step used
                res.count_error(f"refused:{err.code}")

    run_episodes(args, "random_edit", play)
    return 0


if __name__ == "__main__":
    sys.exit(main())

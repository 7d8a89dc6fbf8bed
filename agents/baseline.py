"""Baseline agent: writes the task's naive baseline.cu (from the task folder on disk) and submits
it; its score is near 0 against the expert. Without a GPU it compiles only and says so."""
from __future__ import annotations

import sys

import d2k

from .common import (EpisodeResult, add_tasks_dir, base_parser, describe, run_episodes, submit_or_compile,
                     task_folder)


def main(argv: list[str] | None = None) -> int:
    p = base_parser("baseline", describe(__doc__))
    add_tasks_dir(p)
    args = p.parse_args(argv)
    path = task_folder(args.tasks_dir, args.task) / "baseline.cu"
    if not path.is_file():
        raise SystemExit(f"error: {path} missing")
    source = path.read_text()

    def play(session: d2k.Session, res: EpisodeResult, gpu: bool) -> None:
        main_file = session.observation["task"]["main_file"]
        res.take(session.write_file(main_file, source))
        submit_or_compile(session, res, gpu)

    results = run_episodes(args, "baseline", play)
    return 0 if all(r.compiled is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

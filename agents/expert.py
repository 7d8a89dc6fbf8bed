"""Expert replayer: writes the layer's expert design (read from the task folder on disk, since
the protocol never serves expert files) and submits it. On a GPU its score comes out near 1;
without one it compiles the expert and says so."""
from __future__ import annotations

import sys

import d2k

from .common import (EpisodeResult, add_tasks_dir, base_parser, describe, expert_source, run_episodes,
                     submit_or_compile, task_folder)


def main(argv: list[str] | None = None) -> int:
    p = base_parser("expert", describe(__doc__))
    add_tasks_dir(p)
    args = p.parse_args(argv)
    source = expert_source(task_folder(args.tasks_dir, args.task), args.layer)

    def play(session: d2k.Session, res: EpisodeResult, gpu: bool) -> None:
        main_file = session.observation["task"]["main_file"]
        res.take(session.write_file(main_file, source))
        submit_or_compile(session, res, gpu)

    results = run_episodes(args, "expert", play)
    return 0 if all(r.compiled is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

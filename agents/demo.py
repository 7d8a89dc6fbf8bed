"""The README's demo: the expert-replay and baseline agents over every task and layer of a server,
with progress, then a table of rewards. Without a GPU every episode compiles only, and it says so."""
from __future__ import annotations

import argparse
import os
import sys
import time

import d2k

from .common import EpisodeResult, describe, expert_source, submit_or_compile, task_folder, REPO


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.demo", description=describe(__doc__))
    p.add_argument("--endpoint", default=os.environ.get("D2K_ENDPOINT", d2k.DEFAULT_ENDPOINT),
                   help="server address (env D2K_ENDPOINT; default %(default)s)")
    p.add_argument("--tasks-dir", default=os.environ.get("D2K_TASKS_DIR", str(REPO / "tasks")),
                   help="task folders on disk (the agents read expert and baseline sources there)")
    p.add_argument("--layers", default="0,1,2,3", help="comma-separated layers (default %(default)s)")
    p.add_argument("--task", action="append", help="only this task (repeatable; default: every task)")
    args = p.parse_args(argv)
    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    from pathlib import Path

    rows: list[EpisodeResult] = []
    with d2k.Client(args.endpoint) as client:
        gpu = bool(client.hello("agents.demo").get("gpus"))
        tasks = [t["id"] for t in client.list_tasks() if not args.task or t["id"] in args.task]
        if not gpu:
            print("NOTE: the server has no GPU. Each episode writes its kernel and compiles it in the sandbox;\n"
                  "      the submit that would time it against the expert needs a GPU, so rewards are compile-only.",
                  flush=True)
        total = len(tasks) * len(layers) * 2
        done = 0
        start = time.monotonic()
        for task in tasks:
            folder = task_folder(Path(args.tasks_dir), task)
            baseline = (folder / "baseline.cu").read_text()
            for layer in layers:
                for agent, source in (("expert", expert_source(folder, layer)), ("baseline", baseline)):
                    done += 1
                    print(f"[{done:3d}/{total}] {agent:8s} {task} L{layer} ... ", end="", flush=True)
                    res = EpisodeResult(agent, task, layer, 0, gpu=gpu)
                    with client.reset(task, layer, seed=1000 + layer, label=f"agents.demo.{agent}") as s:
                        res.take(s.write_file(s.observation["task"]["main_file"], source))
                        submit_or_compile(s, res, gpu)
                    rows.append(res)
                    print(f"reward {res.total_reward:+.3f}" + (f", score {res.score:.3f}" if res.score is not None else "")
                          + f"  ({time.monotonic() - start:.0f} s)", flush=True)
    print()
    print(f"{'task':20s} {'layer':>5s} {'agent':9s} {'compiled':>8s} {'reward':>8s} {'score':>7s}  end")
    for r in rows:
        score = f"{r.score:.3f}" if r.score is not None else "n/a"
        print(f"{r.task:20s} {('L' + str(r.layer)):>5s} {r.agent:9s} {str(r.compiled):>8s} {r.total_reward:+8.3f} "
              f"{score:>7s}  {r.end_reason or r.note or ''}")
    if not gpu:
        print("\n(no GPU: scores need `evaluate`/`submit` on a GPU server; on one, the expert scores near 1)")
    return 0 if all(r.compiled is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""RL-style loop: N episodes at once on one asyncio client, a progress bar, a reward table.

Each episode follows a tiny scripted "policy" (write the starter back with a tweak chosen by the
episode's seed, compile, then evaluate/submit on a GPU server). Without a GPU the episodes are
compile-only and the script says so.

    python examples/python/rl_loop.py --episodes 64 [--endpoint ...] [--task vector_add]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

try:
    import d2k
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import d2k

try:
    from tqdm import tqdm
except ImportError:  # a plain progress line instead
    tqdm = None


class PlainBar:
    def __init__(self, total: int) -> None:
        self.total, self.n = total, 0

    def update(self, k: int = 1) -> None:
        self.n += k
        width = 40
        filled = width * self.n // self.total
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total}", end="",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        print(file=sys.stderr)


def policy(obs: dict, rng: random.Random) -> list[dict]:
    main = obs["task"]["main_file"]
    source = obs["files"][main]
    if rng.random() < 0.25:  # some episodes break the code: the table shows failure rewards
        source += "\nthis_does_not_compile;\n"
    else:
        source += f"\n// variant {rng.randrange(1000)}\n"
    return [d2k.actions.write_file(main, source), d2k.actions.compile()]


async def episode(client: d2k.AsyncClient, task: str, layer: int, seed: int, gpu: bool,
                  sem: asyncio.Semaphore) -> dict:
    async with sem:
        rng = random.Random(seed)
        total, steps, end = 0.0, 0, None
        async with await client.reset(task, layer, seed=seed, label="rl_loop") as s:
            actions = policy(s.observation, rng)
            if gpu:
                actions.append(d2k.actions.submit())
            for action in actions:
                r = await s.step(action)
                total += r.reward
                steps += 1
                end = r.observation.get("end_reason")
                if r.done:
                    break
        return {"seed": seed, "layer": layer, "return": total, "steps": steps,
                "end": end or "open"}


async def run(args) -> list[dict]:
    async with d2k.AsyncClient(args.endpoint) as client:
        hello = await client.hello("rl_loop")
        gpu = bool(hello.get("gpus"))
        if not gpu:
            print("NOTE: the server has no GPU: episodes are compile-only "
                  "(evaluate/submit would be refused with no_gpu); rewards are compile rewards.")
        sem = asyncio.Semaphore(args.concurrency)
        tasks = [asyncio.create_task(episode(client, args.task, i % 4, args.seed + i, gpu, sem))
                 for i in range(args.episodes)]
        bar = tqdm(total=len(tasks), unit="ep") if tqdm else PlainBar(len(tasks))
        results = []
        for fut in asyncio.as_completed(tasks):
            results.append(await fut)
            bar.update(1)
        bar.close()
        return results


def print_table(results: list[dict]) -> None:
    by_layer: dict[int, list[dict]] = defaultdict(list)
    for r in results:
        by_layer[r["layer"]].append(r)
    print(f"{'layer':>5} {'episodes':>8} {'mean return':>12} {'min':>7} {'max':>7}  end reasons")
    for layer in sorted(by_layer):
        rs = by_layer[layer]
        rets = [r["return"] for r in rs]
        ends: dict[str, int] = defaultdict(int)
        for r in rs:
            ends[r["end"]] += 1
        print(f"{layer:>5} {len(rs):>8} {sum(rets) / len(rets):>12.3f} {min(rets):>7.2f} "
              f"{max(rets):>7.2f}  " + ", ".join(f"{k}:{v}" for k, v in sorted(ends.items())))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", default=os.environ.get("D2K_ENDPOINT", d2k.DEFAULT_ENDPOINT))
    p.add_argument("--task", default="vector_add")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=64, help="episodes open at once")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    t0 = time.monotonic()
    results = asyncio.run(run(args))
    print_table(results)
    print(f"{len(results)} episodes in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

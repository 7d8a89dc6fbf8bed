"""Minimal d2k client: open an episode, look at it, compile the starter, close.

    python examples/python/minimal_client.py [--endpoint tcp://127.0.0.1:5555] [--task vector_add]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:
    import d2k
except ImportError:  # running from a checkout without `pip install ./python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    import d2k


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", default=os.environ.get("D2K_ENDPOINT", d2k.DEFAULT_ENDPOINT))
    p.add_argument("--task", default="vector_add")
    p.add_argument("--layer", type=int, default=1)
    args = p.parse_args()

    with d2k.Client(args.endpoint) as client:
        hello = client.hello("minimal_client")
        gpus = hello.get("gpus") or []
        print(f"server {hello['server']} {hello['version']}, GPUs: "
              f"{', '.join(g['name'] for g in gpus) if gpus else 'none (compile-only)'}")
        print("tasks:", ", ".join(t["id"] for t in client.list_tasks()))
        with client.reset(args.task, layer=args.layer, seed=0) as session:
            obs = session.observation
            print(f"session {session.id}: {obs['task']['title']} at L{obs['layer']}")
            print("signature:", obs["task"]["signature"])
            for g in obs["guidance"]:
                print(f"guidance L{g['layer']}: {g['title']}")
            r = session.compile()
            comp = r.last.get("compile") or {}
            print(f"compile ok={comp.get('ok')} reward={r.reward:+.2f} step={r.observation['step']}")
            for d in comp.get("diagnostics", [])[:5]:
                print(f"  {d['file']}:{d['line']}: {d['severity']}: {d['message']}")
            try:
                r = session.evaluate()
                print("evaluation:", r.last.get("evaluation"))
            except d2k.NoGpu:
                print("no GPU on this server: evaluate/submit are refused (no_gpu); compile-only")
        print("closed:", session.end_reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())

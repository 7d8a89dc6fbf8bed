"""``python -m agents <name> [options]``: runs one of the agents (expert, baseline, random_edit, llm)."""
from __future__ import annotations

import importlib
import sys

AGENTS = ("expert", "baseline", "random_edit", "llm", "demo")


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help") or sys.argv[1] not in AGENTS:
        print(f"usage: python -m agents {{{','.join(AGENTS)}}} [options]   (each takes --help)")
        return 0 if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help") else 2
    module = importlib.import_module(f"agents.{sys.argv[1]}")
    return module.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())

"""Baseline agents for d2k-gym (expert replayer, baseline, random edits, LLM).

Run one with ``python -m agents.<name> --help`` or ``python -m agents <name> --help``.
"""
from __future__ import annotations

import sys
from pathlib import Path

try:  # the installed package (pip install ./python) ...
    import d2k  # noqa: F401
except ImportError:  # ... or the source tree, when run from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import d2k  # noqa: F401

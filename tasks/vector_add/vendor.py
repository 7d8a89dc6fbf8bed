#!/usr/bin/env python3
"""vector_add library yardstick (trusted, never shown to agents): PyTorch `a + b`.

The eager elementwise add: one vectorised kernel, 12 bytes per element; the output comes from
the caching allocator (no cudaMalloc per call).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    a, b = T["a"], T["b"]
    return lambda: {"y": a + b}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch a + b", prepare)

#!/usr/bin/env python3
"""swiglu library yardstick (trusted, never shown to agents): PyTorch `F.silu(gate) * up`.

The eager SwiGLU of HF's LlamaMLP on the task's [rows, 2 * cols] input (gate and up halves as
strided views): two kernels, 10 bytes per output element instead of the fused 6.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, c = T["x"], S["cols"]
    gate, up = x[:, :c], x[:, c:]
    return lambda: {"y": F.silu(gate) * up}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.silu(gate) * up", prepare)

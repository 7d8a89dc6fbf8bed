#!/usr/bin/env python3
"""prefix_sum library yardstick (trusted, never shown to agents): PyTorch `torch.cumsum` (CUB's device scan).

torch.cumsum(x, 0, dtype=x.dtype): CUB's decoupled look-back scan underneath, int32 or fp32 as
the workload's dtype says (fp32 accumulates in fp32, as the experts do).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x = T["x"]
    return lambda: {"y": torch.cumsum(x, 0, dtype=x.dtype)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch torch.cumsum (CUB)", prepare)

#!/usr/bin/env python3
"""histogram library yardstick (trusted, never shown to agents): PyTorch `torch.bincount(data, minlength=256)`.

torch.bincount on the uint8 bytes: global atomics into int64 counters, plus the max() that sizes
the output (a second pass and a host sync, as every eager user pays).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    data = T["data"].reshape(-1)
    return lambda: {"bins": torch.bincount(data, minlength=256)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch torch.bincount(minlength=256)", prepare)

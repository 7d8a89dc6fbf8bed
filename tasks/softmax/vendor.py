#!/usr/bin/env python3
"""softmax library yardstick (trusted, never shown to agents): PyTorch `torch.softmax(x, dim=-1)`.

PyTorch's fused softmax kernel (fp32 accumulation for bf16 rows), in the workload's dtype (fp32
or bf16, as the task's per-workload dtypes say).
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
    return lambda: {"y": torch.softmax(x, dim=-1)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch torch.softmax(x, dim=-1)", prepare)

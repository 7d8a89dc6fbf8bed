#!/usr/bin/env python3
"""gemm_skinny library yardstick (trusted, never shown to agents): PyTorch F.linear(x, W).

What a PyTorch user writes for a decode projection: cuBLAS(Lt) bf16 GEMM/GEMV with fp32 accumulation,
the output from the caching allocator.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, W = T["x"], T["W"]
    return lambda: {"y": F.linear(x, W)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.linear (cuBLAS bf16)", prepare)

#!/usr/bin/env python3
"""embedding_bag library yardstick (trusted, never shown to agents): PyTorch `F.embedding_bag(mode='sum')`.

F.embedding_bag(indices, table, offsets, mode='sum', include_last_offset=True) on the task's
int32 indices and rows + 1 offsets: PyTorch's CUDA bag kernel (fp32 accumulation).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    indices, offsets, table = T["indices"], T["offsets"], T["table"]
    return lambda: {"out": F.embedding_bag(indices, table, offsets, mode="sum", include_last_offset=True)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.embedding_bag(mode='sum')", prepare)

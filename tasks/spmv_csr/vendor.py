#!/usr/bin/env python3
"""spmv_csr library yardstick (trusted, never shown to agents): PyTorch sparse CSR `torch.mv` (cuSPARSE SpMV).

torch.sparse_csr_tensor over the task's row_ptr/col_idx/vals (int32 indices; built once, not
timed) times x: cuSPARSE's SpMV. Where this torch has no CSR mv, the n = 1 SpMM (A @ x[:, None]).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    A = torch.sparse_csr_tensor(T["row_ptr"], T["col_idx"], T["vals"], (S["rows"], S["cols"]))
    x = T["x"]
    try:
        torch.mv(A, x)
        return lambda: {"y": torch.mv(A, x)}
    except (RuntimeError, NotImplementedError):
        col = x.unsqueeze(1)
        return lambda: {"y": (A @ col).squeeze(1)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch sparse CSR torch.mv (cuSPARSE)", prepare)

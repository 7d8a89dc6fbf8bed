#!/usr/bin/env python3
"""grouped_gemm vendor yardstick (trusted, never shown to agents): PyTorch's grouped GEMM,
torch._grouped_mm (CUTLASS grouped GEMM on sm_90, bf16 in and out, fp32 accumulation).

What a PyTorch MoE layer calls for the expert GEMMs when the op exists: X (T x K, row-major, each
expert's rows contiguous) times W_g^T for every expert g in one launch; mat_b is W viewed as
G x K x N (W.transpose(1, 2): column-major per expert, no copy) and `offs` the G group ends
(offsets[1:], int32, on the device: no host synchronisation). For an N that is not a multiple of 8
(the odd hidden workload) W is padded with zero rows to the next multiple of 8 before timing, so
that the output rows are 16-byte aligned as CUTLASS wants, and Y is the first N columns (what a
PyTorch user does). Where torch has no _grouped_mm the yardstick is the loop of torch.mm calls that
bench/loop_torch.py times (one cuBLAS GEMM per non-empty expert).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare_loop(torch, F, T, S):
    """One torch.mm per non-empty expert into its rows of Y. The group sizes are read on the host
    here, outside the timed call (a real MoE layer pays a device-to-host synchronisation for them)."""
    x, w, y = T["X"], T["W"], T["Y"]
    offs = T["offsets"].tolist()
    spans = [(g, offs[g], offs[g + 1]) for g in range(len(offs) - 1) if offs[g + 1] > offs[g]]

    def call():
        for g, b, e in spans:
            torch.mm(x[b:e], w[g].t(), out=y[b:e])
        return {"Y": y}

    return call


def prepare(torch, F, T, S):
    if not hasattr(torch, "_grouped_mm"):
        return prepare_loop(torch, F, T, S)
    x, w = T["X"], T["W"]
    n = w.shape[1]
    n_pad = (n + 7) // 8 * 8
    if n_pad != n:
        w = torch.cat([w, torch.zeros(w.shape[0], n_pad - n, w.shape[2], dtype=w.dtype, device=w.device)], 1)
    wt = w.transpose(1, 2)  # G x K x N_pad, column-major per expert
    ends = T["offsets"][1:].contiguous()  # int32 group ends

    def call():
        y = torch._grouped_mm(x, wt, offs=ends, out_dtype=torch.bfloat16)
        return {"Y": y if n_pad == n else y[:, :n]}

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "torch._grouped_mm (CUTLASS grouped GEMM)", prepare)

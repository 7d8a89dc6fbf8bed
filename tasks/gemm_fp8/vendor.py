#!/usr/bin/env python3
"""gemm_fp8 vendor yardstick (trusted, never shown to agents): cuBLASLt's fp8 GEMM through
torch._scaled_mm.

What a PyTorch fp8 inference stack calls for a linear layer with per-tensor scales: A (M x K e4m3,
row-major) times B^T (B is N x K e4m3, so B.t() is the column-major K x N operand cuBLASLt wants),
fp32 scales, bf16 out, use_fast_accum=False (the default: cuBLASLt promotes the tensor cores' fp8
partial sums into fp32, the task's fp32 accumulation; fast accumulation drifts at large K).
torch._scaled_mm wants N % 16 == 0: for an odd N (the odd hidden workload) B is padded with zero
rows to the next multiple of 16 before timing and C is the first N columns of the product, which
is what a PyTorch user does.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    fp8 = torch.float8_e4m3fn
    a = T["A"].view(fp8)  # uint8 codes reinterpreted, no conversion
    b = T["B"].view(fp8)
    n = b.shape[0]
    n_pad = (n + 15) // 16 * 16
    if n_pad != n:
        b = torch.cat([b.view(torch.uint8), torch.zeros(n_pad - n, b.shape[1], dtype=torch.uint8, device=b.device)]).view(fp8)
    sa, sb = T["scale_a"], T["scale_b"]  # one fp32 value each: tensor-wise scaling
    bt = b.t()  # K x N_pad, column-major

    def call():
        c = torch._scaled_mm(a, bt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=False)
        return {"C": c if n_pad == n else c[:, :n]}

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "torch._scaled_mm (cuBLASLt fp8)", prepare)

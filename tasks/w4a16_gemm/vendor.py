#!/usr/bin/env python3
"""w4a16_gemm library yardstick (trusted, never shown to agents): the PyTorch path a user writes
without a W4A16 kernel, timed as one call: dequantize the packed weight to bf16, then F.linear.

    q = stack(Wq & 15, Wq >> 4) interleaved along K   (low nibble first)
    W = (q.to(bfloat16) - 8) * scales                 (per group of 128 k; one bf16 rounding)
    y = F.linear(x, W)                                (cuBLAS bf16 GEMM/GEMV, fp32 accumulation)

Both steps are timed: the dequantized weight is not kept between calls (keeping it would be the
bf16 layer, four times the memory, which is what W4A16 avoids). The dequantization writes and
re-reads N x K bf16 (four bytes per packed byte and more), so the yardstick moves several times the
task's bytes; at prefill (M in the thousands) F.linear dominates and the figure approximates the bf16
cuBLAS GEMM of the same shape, the issue's yardstick there.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, Wq, scales = T["x"], T["Wq"], T["scales"]
    N, K = S["N"], S["K"]
    # The task asks for fp32 accumulation: no reduced-precision bf16 split-K reduction in cuBLAS
    # (see tasks/gemm_skinny/vendor.py: at M = 64 it put outputs outside the tolerance).
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False

    def call():
        q = torch.stack((Wq & 15, Wq >> 4), dim=-1).view(N, K // 128, 128)
        W = ((q.to(torch.bfloat16) - 8) * scales.view(N, K // 128, 1)).view(N, K)
        return {"y": F.linear(x, W)}

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch dequantize (bf16) + F.linear (cuBLAS bf16)", prepare)

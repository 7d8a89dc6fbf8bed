#!/usr/bin/env python3
"""rmsnorm library yardstick (trusted, never shown to agents): PyTorch `F.rms_norm`.

F.rms_norm(x, (cols,), w, eps=1e-6) (torch >= 2.4; before that the eager formula in fp32, as
HF's LlamaRMSNorm writes it). The reference's eps is 1e-6.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, w, cols = T["x"], T["w"], S["cols"]
    if hasattr(F, "rms_norm"):
        return lambda: {"y": F.rms_norm(x, (cols,), w, eps=1e-6)}

    def eager():
        xf = x.float()
        return {"y": (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w}

    return eager


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.rms_norm", prepare)

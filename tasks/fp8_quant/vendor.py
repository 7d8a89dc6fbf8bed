#!/usr/bin/env python3
"""fp8_quant library yardstick (trusted, never shown to agents): PyTorch eager abs/amax/div/mul/clamp/`to(float8_e4m3fn)`.

The eager dynamic per-token quantization: amax per row, scale = amax / 448, codes = x * (448 /
amax) clamped and converted to e4m3 (round to nearest even, as the reference's SATFINITE cvt).
The divisions divide by a 0-dim device tensor: a Python scalar divisor makes PyTorch multiply by
its reciprocal (one more rounding), and the task checks scales and codes bit for bit.
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
    c448 = torch.full((), 448.0, dtype=torch.float32, device=x.device)

    def call():
        a = x.abs().amax(dim=-1, keepdim=True).float().clamp_(min=1e-12)
        q = (x.float() * torch.div(c448, a)).clamp_(-448.0, 448.0).to(torch.float8_e4m3fn)
        return {"q": q.view(torch.uint8), "scale": torch.div(a, c448).squeeze(-1)}

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch eager amax + to(float8_e4m3fn)", prepare)

#!/usr/bin/env python3
"""fft library yardstick (trusted, never shown to agents): cuFFT through PyTorch, torch.fft.fft.

The interleaved fp32 input viewed as complex64 (no copy), one batched C2C forward transform along
the last dimension (PyTorch plans it once and caches the plan, so the timed calls run only the
cuFFT kernels), the complex64 result viewed back as interleaved fp32.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x = torch.view_as_complex(T["x"])  # [batch, n, 2] fp32 -> [batch, n] complex64, same storage
    return lambda: {"y": torch.view_as_real(torch.fft.fft(x, dim=-1))}


if __name__ == "__main__":
    vendor_torch.main(__file__, "cuFFT via torch.fft.fft (C2C fp32)", prepare)

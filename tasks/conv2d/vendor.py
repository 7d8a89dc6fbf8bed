#!/usr/bin/env python3
"""conv2d vendor yardstick (trusted, never shown to agents): cuDNN through PyTorch.

What a PyTorch user runs for the layer: F.conv2d(x, w, padding=R // 2) on bf16 tensors in
channels-last memory format. The task's NHWC x is the same bytes as an NCHW tensor in
torch.channels_last (x.permute(0, 3, 1, 2) is that view, no copy), and the KRSC filters are a
channels-last K x C x R x R weight (wt.permute(0, 3, 1, 2)); the output comes back channels-last,
so y.permute(0, 2, 3, 1) is NHWC again, no copy. torch.backends.cudnn.benchmark is on, as in
a tuned training or inference script: cuDNN tries its algorithms once per shape (in the untimed
first call) and keeps the fastest. Run by `d2k verify-tasks` in the same run as the task's
kernels, through the shared harness tasks/vendor_torch.py: the task's inputs, the op checked
against reference.cu under the task's tolerances, then timed (3 warm-ups, 20 samples after an L2
flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    torch.backends.cudnn.benchmark = True
    x = T["x"].permute(0, 3, 1, 2)   # N x C x H x W view, channels-last strides
    w = T["wt"].permute(0, 3, 1, 2)  # K x C x R x R view, channels-last strides
    pad = int(S["R"]) // 2

    def call():
        y = F.conv2d(x, w, padding=pad)
        return {"y": y.permute(0, 2, 3, 1)}  # N x H x W x K (contiguous when cuDNN kept channels-last)

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "F.conv2d channels-last (cuDNN, benchmark mode)", prepare)

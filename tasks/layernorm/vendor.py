#!/usr/bin/env python3
"""layernorm library yardstick (trusted, never shown to agents): PyTorch `F.layer_norm`.

F.layer_norm(x, (cols,), w, b, eps=1e-5): PyTorch's fused row kernel (fp32 statistics), the
reference's eps.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, w, b, cols = T["x"], T["w"], T["b"], S["cols"]
    return lambda: {"y": F.layer_norm(x, (cols,), w, b, eps=1e-5)}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.layer_norm", prepare)

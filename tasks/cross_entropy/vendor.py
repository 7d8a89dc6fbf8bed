#!/usr/bin/env python3
"""cross_entropy library yardstick (trusted, never shown to agents): PyTorch `F.cross_entropy(x.float(), labels, reduction='none')`.

As HF models compute the loss: the bf16 logits upcast to fp32 (a bf16 log-softmax would miss the
task's 1e-4 tolerance), then log-softmax and the NLL gather. The labels' int64 copy is made once,
not timed (a trainer's labels are int64 already).
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    x, labels = T["x"], T["labels"].long()
    return lambda: {"loss": F.cross_entropy(x.float(), labels, reduction="none")}


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch F.cross_entropy(x.float(), reduction='none')", prepare)

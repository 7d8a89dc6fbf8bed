#!/usr/bin/env python3
"""rope library yardstick (trusted, never shown to agents): PyTorch eager rotate-half (gather cos/sin by position, multiply, concatenate).

PyTorch has no single RoPE op: this is the eager NeoX rotate-half a model writes (HF's
apply_rotary_pos_emb), cos/sin gathered by position id, in fp32, rounded to bf16 once.
Run by `d2k verify-tasks` in the same run as the task's kernels, through the shared harness
tasks/vendor_torch.py: the task's inputs, the op checked against reference.cu under the task's
tolerances, then timed (3 warm-ups, 20 samples after an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)


def prepare(torch, F, T, S):
    q, k, h = T["q"], T["k"], S["head_dim"] // 2
    cos_cache, sin_cache, positions = T["cos_cache"], T["sin_cache"], T["positions"].long()

    def call():
        c = cos_cache[positions].unsqueeze(1)  # tokens x 1 x h
        s = sin_cache[positions].unsqueeze(1)

        def rotate(x):
            x1, x2 = x[..., :h].float(), x[..., h:].float()
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)

        return {"q_out": rotate(q), "k_out": rotate(k)}

    return call


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch eager rotate-half RoPE", prepare)

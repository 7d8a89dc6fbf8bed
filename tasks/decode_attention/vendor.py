#!/usr/bin/env python3
"""decode_attention library yardstick (trusted, never shown to agents): PyTorch has no paged decode
attention op, so this is what a user writes in eager PyTorch: gather the sequences' pages out of the
cache, then one variable-length FlashAttention call.

Timed per call: the gather (k_cache[pages] and v_cache[pages], reordered to packed (token, kv head,
dim) rows, the partly filled last pages cut to the sequences' lengths: index_select copies) and
`torch.nn.attention.varlen.varlen_attn(q, k, v, cu_seq_q, cu_seq_k, 1, max_k)` (FlashAttention's
varlen forward, grouped-query heads natively). Built once, untimed: the token index list and the
cumulative lengths, from the page table. Where this torch has no varlen_attn (or it fails), a loop
over the sequences of gather + F.scaled_dot_product_attention(enable_gqa=True). Sequences without
pages give 0. Run by `d2k verify-tasks` through tasks/vendor_torch.py: the task's inputs, the op
checked against reference.cu under the task's tolerances, then timed (3 warm-ups, 20 samples after
an L2 flush, the median).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)

PAGE, D = 16, 128


def prepare(torch, F, T, S):
    q, kc, vc = T["q"], T["k_cache"], T["v_cache"]
    B, Hq, Hkv = S["B"], S["Hq"], S["Hkv"]
    ptr = T["page_ptr"].long().cpu()
    last = T["last_len"].long().cpu()
    npages = ptr[1:] - ptr[:-1]
    lens = torch.where(npages > 0, PAGE * (npages - 1) + last, torch.zeros_like(npages))
    nonempty = (lens > 0).to(q.device)[:, None, None]
    pages = T["page_idx"].long()
    # Token rows of the gathered pages (page-major, 16 slots each) that belong to the sequences.
    keep = []
    for b in range(B):
        if lens[b] > 0:
            keep.append(torch.arange(int(lens[b])) + PAGE * int(ptr[b]))
    keep = torch.cat(keep).to(q.device) if keep else torch.zeros(0, dtype=torch.long, device=q.device)
    cu_k = torch.zeros(B + 1, dtype=torch.int32)
    cu_k[1:] = torch.cumsum(lens, 0).to(torch.int32)
    cu_k = cu_k.to(q.device)
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    max_k = int(lens.max())

    def gather(cache):  # [P, Hkv, 16, D] -> packed [tokens, Hkv, D]
        g = cache.index_select(0, pages).permute(0, 2, 1, 3).reshape(-1, Hkv, D)
        return g.index_select(0, keep)

    try:
        from torch.nn.attention.varlen import varlen_attn

        def call():
            o = varlen_attn(q, gather(kc), gather(vc), cu_q, cu_k, 1, max_k)
            return {"out": torch.where(nonempty, o, torch.zeros_like(o))}

        call()
        torch.cuda.synchronize()
        return call
    except Exception as e:  # no varlen_attn in this torch, or it refuses these heads
        print("vendor.py: varlen_attn unavailable (%s: %s); per-sequence SDPA" % (type(e).__name__, e),
              file=sys.stderr)

    bounds = [(int(ptr[b]), int(ptr[b + 1]), int(lens[b])) for b in range(B)]

    def call_loop():
        out = torch.zeros_like(q)
        for b, (p0, p1, L) in enumerate(bounds):
            if L == 0:
                continue
            idx = pages[p0:p1]
            k = kc.index_select(0, idx).permute(1, 0, 2, 3).reshape(Hkv, -1, D)[:, :L]
            v = vc.index_select(0, idx).permute(1, 0, 2, 3).reshape(Hkv, -1, D)[:, :L]
            out[b] = F.scaled_dot_product_attention(q[b][:, None], k, v, enable_gqa=True)[:, 0]
        return {"out": out}

    return call_loop


if __name__ == "__main__":
    vendor_torch.main(__file__, "PyTorch eager page gather + varlen_attn (FlashAttention varlen)", prepare)

#!/usr/bin/env python3
"""Is gemm_skinny's tolerance fair to cuBLAS? (development tool, not part of the task)

For each timed workload shape: x ~ N(0,1), W ~ U(-0.05, 0.05) in bf16 as task.json draws them; the
reference is the double-precision sum rounded once to bf16 (what reference.cu computes). Counts the
outputs outside the task's tolerance (|y - ref| <= 2e-3 + 1.6e-2 |ref|) and the largest error in bf16
ulps of the reference for: F.linear with PyTorch's default (bf16 reduced-precision reduction
allowed), F.linear with it disallowed (vendor.py's setting), and an fp32 matmul of the same bf16
values rounded once (a plain fp32-accumulated GEMM, TF32 off)."""
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
shapes = [(1, 28672, 8192), (8, 8192, 28672), (16, 4096, 4096), (16, 28679, 8192), (64, 16389, 8192),
          (1, 1031, 16384), (37, 3001, 5000)]
g = torch.Generator(device="cuda").manual_seed(1)


def judge(y, ref):
    y, r = y.float(), ref.float()
    err = (y - r).abs()
    bad = int((err > 2e-3 + 1.6e-2 * r.abs()).sum())
    ulp = torch.where(r == 0, torch.full_like(r, 2.0 ** -133), 2.0 ** (torch.floor(torch.log2(r.abs())) - 7))
    return bad, float(err.max()), float((err / ulp).max())


for seed in range(2):
    for M, N, K in shapes:
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        W = (torch.rand(N, K, device="cuda", generator=g) * 0.1 - 0.05).bfloat16()
        ref = (x.double() @ W.double().T).bfloat16()
        out = {}
        for flag in (True, False):
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = flag
            out["F.linear reduced=%s" % flag] = F.linear(x, W)
        out["fp32 matmul"] = (x.float() @ W.float().T).bfloat16()
        cells = ["%s: %d bad, max %.4g (%.1f ulp)" % ((k,) + judge(v, ref)) for k, v in out.items()]
        print("seed %d m%d_n%d_k%d | %s" % (seed, M, N, K, " | ".join(cells)), flush=True)

#!/usr/bin/env python3
"""conv2d workbench (not part of the task): loads prebuilt kernel .so files (the task's entry,
d2k_conv2d) with ctypes and checks each against PyTorch's fp32 convolution on the task's shapes and
edge shapes (the task's tolerance), then times it against cuDNN bf16 channels-last (CUDA events,
L2 flushed before each sample, median). Prints one line per (shape, kernel); exit 1 on a mismatch.

    python3 check.py [--reps N] [--only L3,L2] name=path.so ...
"""
import argparse
import ctypes
import statistics
import sys

import torch
import torch.nn.functional as F

SHAPES = [  # batch, H, W, C, K, R: edge shapes first (fast), then the task's workloads
    (2, 5, 7, 64, 64, 3), (3, 9, 1, 64, 192, 3), (1, 1, 1, 64, 64, 3), (1, 3, 5, 64, 320, 1),
    (5, 13, 11, 128, 64, 3), (1, 7, 300, 64, 128, 3), (2, 64, 64, 320, 320, 3),
    (256, 28, 28, 128, 128, 3), (256, 14, 14, 256, 256, 3), (256, 28, 28, 128, 512, 1),
    (8, 32, 32, 640, 640, 3), (32, 35, 35, 192, 256, 3), (64, 17, 17, 768, 384, 1),
]
ATOL, RTOL = 0.03, 0.016


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("kernels", nargs="+", help="name=path.so")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    libs = []
    for spec in a.kernels:
        name, path = spec.split("=", 1)
        f = ctypes.CDLL(path).d2k_conv2d
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 6 + [ctypes.c_void_p]
        libs.append((name, f))
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream()
    bad = 0

    def timeit(fn):
        for _ in range(2):
            fn()
        ts = []
        for _ in range(a.reps):
            flush.fill_(1)
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e3)
        return statistics.median(ts)

    for (b, h, w, c, k, r) in SHAPES:
        torch.manual_seed(1)
        x = torch.randn(b, h, w, c, device=dev).to(torch.bfloat16)
        wt = (torch.rand(k, r, r, c, device=dev) * 2 - 1).to(torch.bfloat16)
        ref = F.conv2d(x.permute(0, 3, 1, 2).float(), wt.permute(0, 3, 1, 2).float(), padding=r // 2)
        ref = ref.permute(0, 2, 3, 1).contiguous()
        flops = 2.0 * b * h * w * k * r * r * c
        xv, wv = x.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)
        big = flops > 1e9
        t_dnn = timeit(lambda: F.conv2d(xv, wv, padding=r // 2)) if big else 0.0
        shape = "%dx%dx%dx%d->%d R%d" % (b, h, w, c, k, r)
        line = ["%-25s dnn %7.1fus %4.0fTF" % (shape, t_dnn, flops / t_dnn / 1e6 if t_dnn else 0)]
        notes = []
        for name, f in libs:
            y = torch.full((b, h, w, k), float("nan"), dtype=torch.bfloat16, device=dev)

            def call():
                return f(x.data_ptr(), wt.data_ptr(), y.data_ptr(), b, h, w, c, k, r, stream.cuda_stream)

            try:
                rc = call()
                torch.cuda.synchronize()
            except Exception as e:  # a fault is sticky: report what ran and stop
                line.append("%s FAULT" % name)
                print(" | ".join(line) + "\n  %s: %s" % (name, str(e)[:200]), flush=True)
                return 1
            if rc != 0:
                line.append("%s rc=%d" % (name, rc))
                bad += 1
                continue
            yf = y.float()
            err = (yf - ref).abs()
            lim = ATOL + RTOL * ref.abs()
            nbad = int((~(err <= lim)).sum())
            worst = float(torch.nan_to_num(err, nan=1e30).max())
            if nbad:
                bad += 1
                i = int(torch.nonzero((~(err <= lim)).reshape(-1))[0])
                pix, ch = divmod(i, k)
                nn, rem = divmod(pix, h * w)
                notes.append("  %s: %d bad, max|err| %.3g, first n=%d h=%d w=%d k=%d got %r want %r" % (
                    name, nbad, worst, nn, rem // w, rem % w, ch, float(yf.reshape(-1)[i]),
                    float(ref.reshape(-1)[i])))
                line.append("%s BAD" % name)
                continue
            t = timeit(call) if big else 0.0
            line.append("%s %.1fus %.2fx" % (name, t, t_dnn / t) if t else "%s ok %.2g" % (name, worst))
        print(" | ".join(line), flush=True)
        for n in notes:
            print(n, flush=True)
        del x, wt, ref
        torch.cuda.empty_cache()
    print("check.py: %s" % ("all correct" if bad == 0 else "%d failures" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

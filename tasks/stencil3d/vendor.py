#!/usr/bin/env python3
"""stencil3d vendor yardstick (trusted, never shown to agents): PyTorch's eager slicing expression.

What a PyTorch user writes for one Jacobi step with a fixed boundary (no library has a 7-point
stencil op; F.conv3d with a 3x3x3 kernel is the other option, but it is a cuDNN convolution doing
27 multiply-adds per cell of which 20 are zero, and it still needs the boundary copied):

    out = x.clone()
    out[1:-1, 1:-1, 1:-1] = 0.25 * c + 0.125 * (six shifted views of x)

Reads {"workloads": [{"name", "sizes": {"nx", "ny", "nz"}}...], "seed": N} on stdin; for each
workload builds x (uniform in [-1, 1), fp32, shape [nz, ny, nx]) on cuda, checks the expression
against a float64 evaluation on a small grid once, and times it with CUDA events: 3 warm-ups, then
20 samples, each preceded by an L2 flush (a 256 MiB buffer write). Prints
{"vendor": "torch eager slicing <version>", "workloads": [{"name", "median_s", "samples"}]}.
"""
import json
import os
import statistics
import sys


def fail(msg):
    print("vendor.py: " + msg, file=sys.stderr)
    sys.exit(1)


def step(x):
    out = x.clone()
    if min(x.shape) >= 3:
        c = x[1:-1, 1:-1, 1:-1]
        six = (x[1:-1, 1:-1, :-2] + x[1:-1, 1:-1, 2:] + x[1:-1, :-2, 1:-1] + x[1:-1, 2:, 1:-1]
               + x[:-2, 1:-1, 1:-1] + x[2:, 1:-1, 1:-1])
        out[1:-1, 1:-1, 1:-1] = 0.25 * c + 0.125 * six
    return out


def self_check(torch, dev):
    """The expression against a float64 loop on a 5 x 6 x 7 grid (the yardstick must compute the task)."""
    x = torch.rand((5, 6, 7), device=dev, dtype=torch.float32) * 2 - 1
    got = step(x).double().cpu()
    h = x.double().cpu()
    want = h.clone()
    for z in range(1, 4):
        for y in range(1, 5):
            for i in range(1, 6):
                want[z, y, i] = 0.25 * h[z, y, i] + 0.125 * (h[z, y, i - 1] + h[z, y, i + 1] + h[z, y - 1, i]
                                                             + h[z, y + 1, i] + h[z - 1, y, i] + h[z + 1, y, i])
    err = (got - want).abs().max().item()
    if not err <= 1e-6:
        fail("the eager expression differs from the task's definition by %g" % err)


def main():
    # Only the result line goes to stdout: whatever libraries print there goes to stderr instead.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(os.dup(2), "w")
    try:
        import torch
    except Exception as e:
        fail("cannot import torch: %s" % e)
    if not torch.cuda.is_available():
        fail("torch reports no CUDA device")
    try:
        req = json.load(sys.stdin)
    except Exception as e:
        fail("bad JSON on stdin: %s" % e)
    torch.manual_seed(int(req.get("seed", 1)))
    dev = torch.device("cuda")
    self_check(torch, dev)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = []
    for w in req.get("workloads", []):
        s = w["sizes"]
        shape = (int(s["nz"]), int(s["ny"]), int(s["nx"]))
        x = torch.rand(shape, device=dev, dtype=torch.float32) * 2 - 1
        for _ in range(3):
            step(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            flush.fill_(1)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out.append({"name": w["name"], "median_s": statistics.median(times), "samples": len(times)})
        del x
    with os.fdopen(result_fd, "w") as result:
        result.write(json.dumps({"vendor": "torch eager slicing %s" % torch.__version__, "workloads": out}) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""topk library yardstick (trusted, never shown to agents): PyTorch torch.topk.

Reads {"workloads": [{"name", "sizes"}...], "seed": N} on stdin; for each workload builds fp32
x of shape [rows, vocab] ~ N(0, 3) on cuda (as task.json generates it) and times
torch.topk(x, k, dim=1, largest=True, sorted=True, out=(values, indices)) with CUDA events: 3
warm-ups, then 20 samples, each preceded by an L2 flush (a 256 MiB buffer write). torch.topk's
order among equal values is unspecified, so its output is not compared here; the indices it
returns are int64 (the task's are int32). Prints {"vendor": "torch.topk <version>",
"workloads": [{"name", "median_s", "samples"}]} as the last line of stdout.
"""
import json
import os
import statistics
import sys


def fail(msg):
    print("vendor.py: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    # Only the result line goes to stdout; whatever libraries print goes to stderr.
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
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    out = []
    for w in req.get("workloads", []):
        s = w["sizes"]
        rows, vocab, k = int(s["rows"]), int(s["vocab"]), int(s["k"])
        x = torch.randn((rows, vocab), device=dev, dtype=torch.float32) * 3.0
        values = torch.empty((rows, k), device=dev, dtype=torch.float32)
        indices = torch.empty((rows, k), device=dev, dtype=torch.int64)
        for _ in range(3):
            torch.topk(x, k, dim=1, largest=True, sorted=True, out=(values, indices))
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            flush.fill_(1)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.topk(x, k, dim=1, largest=True, sorted=True, out=(values, indices))
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out.append({"name": w["name"], "median_s": statistics.median(times), "samples": len(times)})
        del x, values, indices
    with os.fdopen(result_fd, "w") as result:
        result.write(json.dumps({"vendor": "torch.topk %s" % torch.__version__, "workloads": out}) + "\n")


if __name__ == "__main__":
    main()

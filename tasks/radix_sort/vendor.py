#!/usr/bin/env python3
"""radix_sort library yardstick (trusted, never shown to agents): PyTorch's stable sort + gather.

Reads {"workloads": [{"name", "sizes"}...], "seed": N} on stdin; for each workload builds n int32
keys and n int32 values, uniform over all 32-bit patterns, on cuda, and times what a PyTorch user
writes for a stable key/value sort:

    sorted_keys, perm = torch.sort(keys, stable=True)   # CUB radix sort of (key, int64 index)
    sorted_vals = vals[perm]                             # gather

with CUDA events: 3 warm-ups, then 20 samples, each preceded by an L2 flush (a 256 MiB buffer
write). PyTorch has no uint32 sort on CUDA, so the keys are int32 (same bytes and the same radix
passes; only the sign bit's order differs, which the timing does not depend on). Prints
{"vendor": "torch.sort(stable)+gather <version>", "workloads": [{"name", "median_s", "samples"}]}
as the last line of stdout.
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
    lo, hi = -(1 << 31), (1 << 31) - 1
    out = []
    for w in req.get("workloads", []):
        n = int(w["sizes"]["n"])
        keys = torch.randint(lo, hi, (n,), device=dev, dtype=torch.int32)
        vals = torch.randint(lo, hi, (n,), device=dev, dtype=torch.int32)

        def run():
            sorted_keys, perm = torch.sort(keys, stable=True)
            return sorted_keys, vals[perm]

        for _ in range(3):
            run()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            flush.fill_(1)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out.append({"name": w["name"], "median_s": statistics.median(times), "samples": len(times)})
        del keys, vals
    with os.fdopen(result_fd, "w") as result:
        result.write(json.dumps({"vendor": "torch.sort(stable)+gather %s" % torch.__version__,
                                 "workloads": out}) + "\n")


if __name__ == "__main__":
    main()

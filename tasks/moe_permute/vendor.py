#!/usr/bin/env python3
"""moe_permute vendor yardstick (trusted, never shown to agents): what a PyTorch user writes.

    flat = topk_ids.view(-1)                                  # int32, tokens * k
    order = torch.argsort(flat, stable=True)                  # (expert, entry) order
    offsets = zeros(experts + 1); offsets[1:] = cumsum(bincount(flat, minlength=experts))
    rows = x.index_select(0, order // k)                      # output-ordered gather

(argsort returns int64; the casts to int32 that the task's outputs have are part of the timed
call.) Reads {"workloads": [{"name", "sizes": {"tokens", "k", "experts", "hidden"}}...], "seed": N}
on stdin; for each workload builds topk_ids (uniform in [0, experts), int32) and x (normal(0, 1),
bf16) on cuda, checks the result against the definition once on a small case, and times the
expression with CUDA events: 3 warm-ups, then 20 samples, each preceded by an L2 flush (a 256 MiB
buffer write). Prints {"vendor": "torch argsort+bincount+index_select <version>", "workloads":
[{"name", "median_s", "samples"}]}.
"""
import json
import os
import statistics
import sys


def fail(msg):
    print("vendor.py: " + msg, file=sys.stderr)
    sys.exit(1)


def permute(torch, ids, x, k, experts):
    flat = ids.view(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts)
    offsets = torch.zeros(experts + 1, dtype=torch.int32, device=ids.device)
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    rows = x.index_select(0, order // k)
    return order.to(torch.int32), offsets, rows


def self_check(torch, dev):
    """The expression against the task's definition on 37 tokens, top-3 of 5 experts."""
    tokens, k, experts, hidden = 37, 3, 5, 6
    ids = torch.randint(0, experts, (tokens, k), device=dev, dtype=torch.int32)
    x = torch.randn((tokens, hidden), device=dev).to(torch.bfloat16)
    order, offsets, rows = permute(torch, ids, x, k, experts)
    flat = ids.view(-1).tolist()
    want = sorted(range(tokens * k), key=lambda i: (flat[i], i))
    if order.tolist() != want:
        fail("argsort(stable=True) does not give the (expert, entry) order")
    if offsets.tolist() != [sum(1 for v in flat if v < e) for e in range(experts + 1)]:
        fail("bincount + cumsum does not give the offsets")
    if not torch.equal(rows, x[[i // k for i in want]]):
        fail("index_select does not give the rows")


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
        tokens, k, experts, hidden = int(s["tokens"]), int(s["k"]), int(s["experts"]), int(s["hidden"])
        ids = torch.randint(0, experts, (tokens, k), device=dev, dtype=torch.int32)
        x = torch.randn((tokens, hidden), device=dev).to(torch.bfloat16)
        for _ in range(3):
            permute(torch, ids, x, k, experts)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            flush.fill_(1)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            permute(torch, ids, x, k, experts)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        out.append({"name": w["name"], "median_s": statistics.median(times), "samples": len(times)})
        del ids, x
    with os.fdopen(result_fd, "w") as result:
        result.write(json.dumps({"vendor": "torch argsort+bincount+index_select %s" % torch.__version__,
                                 "workloads": out}) + "\n")


if __name__ == "__main__":
    main()

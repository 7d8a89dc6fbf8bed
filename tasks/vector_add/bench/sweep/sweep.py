#!/usr/bin/env python3
"""Side-by-side timing of kernel variants of several tasks on one GPU (a tuning aid, not a verdict:
that is `d2k verify-tasks`). Usage: python3 sweep.py TASKS_DIR SO_DIR [task ...]

SO_DIR holds `<task>__<variant>.so` builds of the task's entry (built by build.sh) and bw.so. For each
task, every timed workload of its task.json (inputs built by tasks/vendor_torch.py) is run through
every variant; each output is compared with the first variant's (`cur`, the expert as verified) under
the task's tolerance, then timed like the runner times kernels: an L2 flush (256 MiB write), the device
idle, one call between two events; the median of SAMPLES. For vector_add, PyTorch's `a + b` is timed
the same way and also as tasks/vendor_torch.py times it (the call queued behind the flush, the GPU never
idle at the first event), and so is the L3, to separate launch latency from kernel time. bw.so probes
write-only, read-only, copy and read-once-write-k bandwidth first.
"""
import ctypes
import json
import os
import statistics
import sys
import time

import torch

SAMPLES = int(os.environ.get("SWEEP_SAMPLES", "15"))
tasks_dir, so_dir = sys.argv[1], sys.argv[2]
only = sys.argv[3:]
sys.path.insert(0, tasks_dir)
import vendor_torch as vt  # noqa: E402

dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
stream = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)  # noqa: E731
T0 = time.time()


def timeit(fn, mode="idle", samples=SAMPLES):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(samples):
        flush.fill_(1)
        if mode == "idle":
            torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(ts)


def out(line):
    print("[%5.1fs] %s" % (time.time() - T0, line), flush=True)


# --- bandwidth probes -------------------------------------------------------------------------------
bw = ctypes.CDLL(os.path.join(so_dir, "bw.so"))
G = 1 << 30
a = torch.empty(2 * G, dtype=torch.uint8, device=dev)
b = torch.empty(2 * G, dtype=torch.uint8, device=dev)
a.fill_(3)
sink = torch.zeros(4, dtype=torch.int32, device=dev)
pa, pb = ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr())
n2 = ctypes.c_int64(2 * G)
copy_t = timeit(lambda: b.copy_(a))
COPY = 2 * 2 * G / copy_t
out("copy bandwidth: cudaMemcpy D2D of 2 GiB %.1f us -> %.0f GB/s (read + write)" % (copy_t * 1e6, COPY / 1e9))
for name, fn, nbytes in [
    ("copy kernel 2 GiB (16-byte)", lambda: bw.bw_copy(pa, pb, n2, stream()), 4 * G),
    ("write-only 2 GiB", lambda: bw.bw_write(pb, n2, 0, stream()), 2 * G),
    ("write-only 2 GiB, .cs stores", lambda: bw.bw_write(pb, n2, 1, stream()), 2 * G),
    ("torch fill_ 2 GiB (write-only)", lambda: b.fill_(1), 2 * G),
    ("read-only 2 GiB", lambda: bw.bw_read(pa, n2, ctypes.c_void_p(sink.data_ptr()), stream()), 2 * G),
]:
    t = timeit(fn)
    out("%-34s %8.1f us  %6.0f GB/s  %5.1f%% of copy" % (name, t * 1e6, nbytes / t / 1e9, 100 * nbytes / t / COPY))
for rows, row_bytes, k in [(16384, 14336, 8), (8192, 8192, 8), (4096, 14336, 8), (16384, 8192, 2)]:
    for cs in (0, 1):
        nbytes = rows * row_bytes * (k + 1)
        t = timeit(lambda: bw.bw_fanout(pa, pb, rows, row_bytes, k, cs, stream()))
        out("fan-out rows %5d x %5d B, k=%d, cs=%d: %8.1f us  %6.0f GB/s  %5.1f%% of copy" % (
            rows, row_bytes, k, cs, t * 1e6, nbytes / t / 1e9, 100 * nbytes / t / COPY))
del a, b
torch.cuda.empty_cache()
results = {"copy_bytes_per_s": COPY, "runs": []}


def load(task_id):
    names = sorted(f for f in os.listdir(so_dir) if f.startswith(task_id + "__") and f.endswith(".so"))
    names.sort(key=lambda f: (f != task_id + "__cur.so", f))
    task = json.load(open(os.path.join(tasks_dir, task_id, "task.json")))
    libs = []
    for f in names:
        fn = getattr(ctypes.CDLL(os.path.join(so_dir, f)), task["entry"])
        fn.restype = ctypes.c_int
        libs.append((f[len(task_id) + 2:-3], fn))
    return task, libs


def argv_of(task, T, S):
    ctype = {"i64": ctypes.c_int64, "i32": ctypes.c_int32}
    v = []
    for arg in task["args"]:
        v.append(ctype[arg["dtype"]](S[arg["name"]]) if arg["role"] == "scalar" else ctypes.c_void_p(T[arg["name"]].data_ptr()))
    return v


for task_id in only or ["vector_add", "rope", "stencil3d", "moe_permute"]:
    task, libs = load(task_id)
    outs = [x for x in task["args"] if x["role"] == "output"]
    for w in task["workloads"]:
        if not w.get("timed", True):
            continue
        torch.manual_seed(1)
        T, S = vt.build_inputs(torch, task, w, dev)
        nbytes = vt.eval_size(task["bytes"], w["sizes"])
        argv = argv_of(task, T, S)
        want = None
        libs[0][1](*argv, stream())  # a throwaway first call and timing: the first variant timed
        timeit(lambda: libs[0][1](*argv, stream()), samples=3)  # is not the one that meets a cold GPU
        for name, fn in libs:
            for o in outs:
                T[o["name"]].view(torch.uint8).fill_(0xFF)
            rc = fn(*argv, stream())
            torch.cuda.synchronize()
            status = "rc=%d" % rc
            if want is None:
                want = {o["name"]: T[o["name"]].clone() for o in outs}
                status += " (truth)"
            else:
                bad = 0
                for o in outs:
                    dt = vt.arg_dtype(task, w, o["name"])
                    n, _, detail = vt.compare(torch, T[o["name"]], want[o["name"]], dt, task["tolerances"].get(dt))
                    bad += n
                    if n:
                        status += " %s: %s" % (o["name"], detail[:120])
                status += " ok" if bad == 0 else " WRONG"
            t = timeit(lambda: fn(*argv, stream()))
            row = {"task": task_id, "workload": w["name"], "variant": name, "mode": "idle", "s": t,
                   "pct_copy": 100 * nbytes / t / COPY, "status": status}
            results["runs"].append(row)
            out("%-11s %-26s %-22s %8.1f us %6.1f%% of copy  %s" % (task_id, w["name"], name, t * 1e6, row["pct_copy"], status))
            if task_id == "vector_add":
                tq = timeit(lambda: fn(*argv, stream()), "queued")
                results["runs"].append(dict(row, mode="queued", s=tq, pct_copy=100 * nbytes / tq / COPY))
                out("%-11s %-26s %-22s %8.1f us %6.1f%% of copy  (queued behind the flush)" % (task_id, w["name"], name, tq * 1e6, 100 * nbytes / tq / COPY))
        if task_id == "vector_add":
            A, B = T["a"], T["b"]
            assert torch.equal(A + B, want["y"]), "torch a + b differs"
            for mode in ("idle", "queued"):
                t = timeit(lambda: A + B, mode)
                results["runs"].append({"task": task_id, "workload": w["name"], "variant": "torch a+b", "mode": mode, "s": t,
                                        "pct_copy": 100 * nbytes / t / COPY})
                out("%-11s %-26s %-22s %8.1f us %6.1f%% of copy  (%s)" % (task_id, w["name"], "torch a+b", t * 1e6, 100 * nbytes / t / COPY, mode))
        del T, want, argv
        torch.cuda.empty_cache()
json.dump(results, open(os.path.join(os.environ.get("OUT", "/tmp"), "sweep.json"), "w"), indent=1)
out("done")

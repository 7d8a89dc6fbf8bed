#!/usr/bin/env python3
"""Library yardstick: every task's L3 expert against PyTorch's eager op, side by side (issue 16).

For the H200 machine (python3.12 + torch + nvcc there; nothing to install). From the repository root:

    python3 bench/yardstick_torch.py [--task ID ...] [--samples 20] [--out FILE.md]

For each task (default: every folder under tasks/ with a task.json) it compiles experts/L3.cu with
nvcc and the task's own flags (`-O3 -arch=sm_90 -shared -Xcompiler -fPIC` plus task.json's
compile_flags, as the sandbox does), loads it with ctypes into this process, and for every timed
workload builds the task's inputs with torch (shapes, dtypes and per-workload overrides from
task.json; the custom generators `csr` and `zipf_bytes` are approximated: same sizes, same kind of
structure) and times, interleaved sample by sample:
  - the L3 expert, called on torch's current stream with the tensors' device pointers;
  - the PyTorch eager op a user would write for the task (TORCH_OPS below, e.g. `a + b`,
    `torch.softmax`, `F.rms_norm`, `F.linear`, SDPA, `F.silu(g) * u`), outputs allocated by torch.
Each sample is one call between two CUDA events, preceded by an L2 flush (a 256 MiB buffer
write); 3 warm-up calls each; the median is reported. Each task runs in its own process (a kernel
that faults cannot take the other tasks' rows with it; --task-timeout bounds each). Figures are printed as a markdown table
(L3 / torch > 1 means the expert is faster) and, with --out, written to a file. It also measures
the device-to-device copy bandwidth (bytes read + written) the way `d2k verify-tasks` reports it.
The "agree" column compares the expert's output with torch's (within 2x the task's tolerance for
floating outputs, exact for integers and FP8 codes): a sanity check, not the verification (that is
`d2k verify-tasks`, against the trusted reference).
"""
import argparse
import concurrent.futures
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- size expressions (docs/task-format.md: + - * / % and parentheses, C integer semantics) ---
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))")


def eval_size(expr, sizes):
    tokens = []
    for num, ident, op in _TOKEN.findall(str(expr)):
        if num:
            tokens.append(("n", int(num)))
        elif ident:
            if ident not in sizes:
                raise ValueError("unknown size %r in %r" % (ident, expr))
            tokens.append(("n", int(sizes[ident])))
        elif op.strip():
            tokens.append(("o", op))
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else ("e", None)

    def primary():
        nonlocal pos
        kind, val = peek()
        pos += 1
        if kind == "n":
            return val
        if (kind, val) == ("o", "-"):
            return -primary()
        if (kind, val) == ("o", "("):
            v = additive()
            pos += 1  # ')'
            return v
        raise ValueError("bad size expression %r" % expr)

    def term():
        nonlocal pos
        v = primary()
        while peek() in (("o", "*"), ("o", "/"), ("o", "%")):
            op = peek()[1]
            pos += 1
            r = primary()
            if op == "*":
                v *= r
            else:
                q = abs(v) // abs(r) * (1 if (v >= 0) == (r >= 0) else -1)  # truncate toward zero
                v = q if op == "/" else v - q * r
        return v

    def additive():
        nonlocal pos
        v = term()
        while peek() in (("o", "+"), ("o", "-")):
            op = peek()[1]
            pos += 1
            r = term()
            v = v + r if op == "+" else v - r
        return v

    return additive()


# --- the PyTorch op of each task: f(T, S) -> {output arg name: torch result} --------------------
# T: the task's tensors by argument name (inputs filled, shapes as in task.json); S: the workload's
# sizes plus the scalar arguments by name.
def _torch_ops(torch, F):
    def vector_add(T, S):
        return {"y": T["a"] + T["b"]}

    def softmax(T, S):
        return {"y": torch.softmax(T["x"], dim=-1)}

    def rmsnorm(T, S):
        if hasattr(F, "rms_norm"):
            return {"y": F.rms_norm(T["x"], (S["cols"],), T["w"], eps=1e-6)}
        x = T["x"].float()
        return {"y": (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * T["w"].float()).to(T["x"].dtype)}

    def layernorm(T, S):
        return {"y": F.layer_norm(T["x"], (S["cols"],), T["w"], T["b"], eps=1e-5)}

    def cross_entropy(T, S):
        return {"loss": F.cross_entropy(T["x"].float(), T["labels"].long(), reduction="none")}

    def rope(T, S):
        h = S["head_dim"] // 2
        p = T["positions"].long()
        c = T["cos_cache"][p].unsqueeze(1)  # tokens x 1 x h
        s = T["sin_cache"][p].unsqueeze(1)

        def rotate(x):
            x1, x2 = x[..., :h].float(), x[..., h:].float()
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)

        return {"q_out": rotate(T["q"]), "k_out": rotate(T["k"])}

    def embedding_bag(T, S):
        return {"out": F.embedding_bag(T["indices"], T["table"], T["offsets"], mode="sum",
                                       include_last_offset=True)}

    def transpose(T, S):
        return {"y": T["x"].t().contiguous()}

    def prefix_sum(T, S):
        return {"y": torch.cumsum(T["x"], 0, dtype=T["x"].dtype)}

    def histogram(T, S):
        return {"bins": torch.bincount(T["data"], minlength=256)}

    def spmv_csr(T, S):
        return {"y": T["_csr"] @ T["x"]}

    def gemm_bf16(T, S):
        return {"C": F.linear(T["A"], T["B"], T["bias"] if S["use_bias"] else None)}

    def flash_attention_fwd(T, S):
        return {"o": F.scaled_dot_product_attention(T["q"], T["k"], T["v"], is_causal=bool(S["causal"]))}

    def swiglu(T, S):
        c = S["cols"]
        return {"y": F.silu(T["x"][:, :c]) * T["x"][:, c:]}

    def fp8_quant(T, S):
        x = T["x"]
        a = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
        q = (x.float() * (448.0 / a)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return {"q": q.view(torch.uint8), "scale": (a / 448.0).squeeze(-1)}

    return {
        "vector_add": ("a + b", vector_add),
        "softmax": ("torch.softmax", softmax),
        "rmsnorm": ("F.rms_norm", rmsnorm),
        "layernorm": ("F.layer_norm", layernorm),
        "cross_entropy": ("F.cross_entropy(x.float()) (as HF models upcast)", cross_entropy),
        "rope": ("eager rotate-half (gather cos/sin, mul, cat)", rope),
        "embedding_bag": ("F.embedding_bag(mode='sum')", embedding_bag),
        "transpose": ("x.t().contiguous()", transpose),
        "prefix_sum": ("torch.cumsum (CUB)", prefix_sum),
        "histogram": ("torch.bincount", histogram),
        "spmv_csr": ("sparse CSR @ x (cuSPARSE)", spmv_csr),
        "gemm_bf16": ("F.linear (cuBLASLt)", gemm_bf16),
        "flash_attention_fwd": ("F.scaled_dot_product_attention", flash_attention_fwd),
        "swiglu": ("F.silu(g) * u", swiglu),
        "fp8_quant": ("abs/amax/mul/clamp/to(float8_e4m3fn)", fp8_quant),
    }


TORCH_DTYPE = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16", "i32": "int32",
               "i64": "int64", "u8": "uint8",
               "u32": "int32"}  # same bytes; torch's uint32 lacks most CUDA ops (counts stay < 2^31)
CTYPE = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "u8": ctypes.c_uint8,
         "f32": ctypes.c_float, "f64": ctypes.c_double}


def nvcc_flags(task):
    arch, extra = "-arch=sm_90", []
    for f in task.get("compile_flags", []):
        if f.startswith("-arch="):
            arch = f
        else:
            extra.append(f)
    return ["-O3", arch, "-shared", "-Xcompiler", "-fPIC"] + extra


def find_nvcc():
    for c in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    sys.exit("yardstick_torch.py: nvcc not found (set NVCC=/path/to/nvcc)")


def compile_l3(nvcc, task_dir, task, out_dir):
    so = os.path.join(out_dir, task["id"] + "_L3.so")
    cmd = [nvcc] + nvcc_flags(task) + ["-o", so, os.path.join(task_dir, "experts", "L3.cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nvcc failed for %s: %s" % (task["id"], (r.stderr or r.stdout)[-800:]))
    return so


# --- inputs ---------------------------------------------------------------------------------------
def make_csr(torch, rows, cols, nnz, params, dev):
    """Row pointers and sorted column indices with exactly nnz entries, shaped like the generator's
    patterns (uniform / power_law / banded); duplicates within a row are possible (timing only)."""
    pattern = params.get("pattern", "uniform")
    g = torch.Generator(device=dev).manual_seed(7)
    if pattern == "power_law":
        alpha = float(params.get("alpha", 2.0))
        u = torch.rand(rows, device=dev, generator=g, dtype=torch.float64).clamp_min(1e-12)
        w = u.pow(-1.0 / alpha)
        lengths = (w / w.sum() * nnz).floor().to(torch.int64)
        lengths.clamp_(max=int(params.get("max_row", cols)))
    else:
        mean = nnz / rows
        lo, hi = int(mean / 3), max(int(mean * 5 / 3), int(mean / 3) + 1)
        lengths = torch.randint(lo, hi + 1, (rows,), device=dev, generator=g) if pattern == "uniform" else \
            torch.full((rows,), int(mean), device=dev, dtype=torch.int64)
        lengths.clamp_(max=cols)
    # Fix the total to exactly nnz: spread the difference over the rows with room.
    diff = nnz - int(lengths.sum())
    while diff != 0:
        step = 1 if diff > 0 else -1
        room = (lengths < cols) if step > 0 else (lengths > 0)
        idx = torch.nonzero(room).flatten()[: abs(diff)]
        lengths[idx] += step
        diff = nnz - int(lengths.sum())
    row_ptr = torch.zeros(rows + 1, dtype=torch.int64, device=dev)
    row_ptr[1:] = torch.cumsum(lengths, 0)
    row_of = torch.repeat_interleave(torch.arange(rows, device=dev), lengths)
    if pattern == "banded":
        within = torch.arange(nnz, device=dev) - row_ptr[row_of]
        col = (row_of - lengths[row_of] // 2 + within).clamp(0, cols - 1)
    else:
        col = torch.randint(0, cols, (nnz,), device=dev, generator=g)
    key = row_of * cols + col
    key, _ = torch.sort(key)
    col = key % cols
    return row_ptr.to(torch.int32), col.to(torch.int32)


def zipf_bytes(torch, n, s, dev):
    v = torch.arange(256, dtype=torch.float64, device=dev)
    rank = (167 * v + 13) % 256
    p = 1.0 / (rank + 1.0).pow(s)
    cdf = torch.cumsum(p / p.sum(), 0).float()
    out = torch.empty(n, dtype=torch.uint8, device=dev)
    chunk = 1 << 27
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        out[i:i + m] = torch.searchsorted(cdf, torch.rand(m, device=dev)).clamp_(max=255).to(torch.uint8)
    return out


def fill(torch, shape, dtype, init, dev):
    dist = init.get("dist")
    if dist == "uniform":
        return (torch.rand(shape, device=dev) * (init["high"] - init["low"]) + init["low"]).to(dtype)
    if dist == "normal":
        return (torch.randn(shape, device=dev) * init["std"] + init["mean"]).to(dtype)
    if dist == "randint":
        return torch.randint(int(init["low"]), int(init["high"]) + 1, shape, device=dev, dtype=torch.int64).to(dtype)
    raise ValueError("no generator for %r" % init)


def build_inputs(torch, task, w, dev):
    sizes = w["sizes"]
    dtypes = w.get("dtypes", {})
    inits = w.get("inits", {})
    T, S, csr = {}, dict(sizes), None
    for a in task["args"]:
        if a["role"] == "scalar":
            S[a["name"]] = eval_size(a["value"], sizes)
            continue
        shape = [eval_size(e, sizes) for e in a["shape"]]
        dt = getattr(torch, TORCH_DTYPE[dtypes.get(a["name"], a["dtype"])])
        if a["role"] == "output":
            T[a["name"]] = torch.empty(shape, dtype=dt, device=dev)
            continue
        init = inits.get(a["name"], a["init"])
        if init.get("dist") == "custom" and init["generator"] == "csr":
            if csr is None:
                csr = make_csr(torch, sizes["rows"], sizes["cols"], sizes["nnz"], w.get("params", {}), dev)
            T[a["name"]] = csr[0] if init["params"]["part"] == "row_ptr" else csr[1]
        elif init.get("dist") == "custom" and init["generator"] == "zipf_bytes":
            n = 1
            for d in shape:
                n *= d
            T[a["name"]] = zipf_bytes(torch, n, float(w.get("params", {}).get("zipf_s", 0.0)), dev).view(shape)
        else:
            T[a["name"]] = fill(torch, shape, dt, init, dev)
    if task["id"] == "spmv_csr":
        T["_csr"] = torch.sparse_csr_tensor(T["row_ptr"], T["col_idx"], T["vals"], (sizes["rows"], sizes["cols"]))
    return T, S


def agree(torch, task, w, name, ours, theirs):
    """Fraction of elements of the expert's output `name` that agree with torch's."""
    dt = w.get("dtypes", {}).get(name, next(a["dtype"] for a in task["args"] if a["name"] == name))
    ours = ours.reshape(-1)
    theirs = theirs.reshape(-1)
    if dt in ("f32", "f64", "bf16", "f16"):
        tol = task["tolerances"][dt]
        a, b = ours.double(), theirs.double()
        ok = (a - b).abs() <= 2 * (tol["atol"] + tol["rtol"] * b.abs())
    else:
        ok = ours.to(torch.int64) == theirs.to(torch.int64)
    return float(ok.double().mean())


def timed_pair(torch, call_a, call_b, samples, flush):
    for _ in range(3):
        call_a()
        call_b()
    torch.cuda.synchronize()
    ta, tb = [], []
    for _ in range(samples):
        for call, out in ((call_a, ta), (call_b, tb)):
            flush.fill_(1)
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            call()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ta), statistics.median(tb)


def run_workload(torch, task, w, entry, op, op_name, samples, flush, copy_bps, dev):
    """Times the L3 expert and the torch op on workload w; returns the table row."""
    T, S = build_inputs(torch, task, w, dev)
    argv = []
    for a in task["args"]:
        if a["role"] == "scalar":
            argv.append(CTYPE[a["dtype"]](S[a["name"]]))
        else:
            argv.append(ctypes.c_void_p(T[a["name"]].data_ptr()))
    result = {}

    def call_l3():
        rc = entry(*argv, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise RuntimeError("%s returned %d" % (task["entry"], rc))

    def call_torch():
        result.update(op(T, S))

    t_l3, t_torch = timed_pair(torch, call_l3, call_torch, samples, flush)
    torch.cuda.synchronize()
    fraction = min(agree(torch, task, w, name, T[name], val) for name, val in result.items())
    nbytes = eval_size(task["bytes"], S)
    return "| %s | %s | %.0f | %s | %.1f | %.1f | %.3f | %.1f | %.1f | %.4f |" % (
        task["id"], w["name"], nbytes / 1e6, op_name, t_torch * 1e6, t_l3 * 1e6, t_torch / t_l3,
        100 * nbytes / t_l3 / copy_bps, 100 * nbytes / t_torch / copy_bps, fraction)


def copy_bandwidth(torch, dev):
    n = 1 << 30
    src = torch.ones(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    times = []
    for i in range(18):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        if i >= 3:
            times.append(s.elapsed_time(e) / 1e3)
    del src, dst
    return 2.0 * n / statistics.median(times)


def run_task_child(args):
    """--child: time one task's workloads with its prebuilt L3 (--so); print one table row each."""
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    with open(os.path.join(args.tasks, args.task[0], "task.json")) as f:
        task = json.load(f)
    op_name, op = _torch_ops(torch, F)[task["id"]]
    lib = ctypes.CDLL(args.so)
    entry = getattr(lib, task["entry"])
    entry.restype = ctypes.c_int
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    for w in task["workloads"]:
        if not w.get("timed", True):
            continue
        try:
            row = run_workload(torch, task, w, entry, op, op_name, args.samples, flush, args.copy_bps, dev)
        except Exception as e:  # one workload failing must not hide the others
            row = "| %s | %s | — | %s | — | — | error: %s | — | — | — |" % (
                task["id"], w["name"], op_name, str(e)[:160].replace("|", "/").replace("\n", " "))
        print(row, flush=True)
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default=os.path.join(ROOT, "tasks"))
    ap.add_argument("--task", action="append", help="task id (repeatable; default: every task)")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--out", help="also write the markdown table to this file")
    ap.add_argument("--task-timeout", type=float, default=300, help="seconds per task (its own process)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--so", help=argparse.SUPPRESS)
    ap.add_argument("--copy-bps", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_task_child(args)
        return

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        sys.exit("yardstick_torch.py: torch reports no CUDA device")
    ops = _torch_ops(torch, F)
    ids = args.task or sorted(d for d in os.listdir(args.tasks) if os.path.isfile(os.path.join(args.tasks, d, "task.json")))
    tasks = {}
    for t in ids:
        with open(os.path.join(args.tasks, t, "task.json")) as f:
            tasks[t] = json.load(f)

    nvcc = find_nvcc()
    work = tempfile.mkdtemp(prefix="d2k-yardstick-")
    t0 = time.time()
    sos, errors = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futs = {pool.submit(compile_l3, nvcc, os.path.join(args.tasks, t), tasks[t], work): t for t in ids}
        for fut in concurrent.futures.as_completed(futs):
            try:
                sos[futs[fut]] = fut.result()
            except Exception as e:  # report and go on with the other tasks
                errors[futs[fut]] = str(e)
    print("compiled %d L3 experts in %.1f s" % (len(sos), time.time() - t0), file=sys.stderr)

    props = torch.cuda.get_device_properties(0)
    copy_bps = copy_bandwidth(torch, torch.device("cuda"))
    torch.cuda.empty_cache()
    lines = [
        "Library yardstick (bench/yardstick_torch.py): %s, torch %s, CUDA %s, %s UTC; copy bandwidth %.0f GB/s "
        "(read + write, 1 GiB D2D); median of %d interleaved samples, L2 flushed before each; each task in its "
        "own process." % (props.name, torch.__version__, torch.version.cuda, time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                          copy_bps / 1e9, args.samples),
        "",
        "| task | workload | MB | PyTorch op | torch µs | L3 µs | L3 / torch (speed) | L3 % copy | torch % copy | agree |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)

    def emit(row):
        lines.append(row)
        print(row, flush=True)

    for t in ids:
        if t not in ops:
            emit("| %s | — | — | no PyTorch op mapped | — | — | — | — | — | — |" % t)
            continue
        op_name = ops[t][0]
        if t in errors:
            emit("| %s | — | — | %s | — | — | compile failed: %s | — | — | — |" % (t, op_name, errors[t][:120].replace("|", "/")))
            continue
        # Each task in its own process: a faulting kernel (a sticky CUDA error) cannot take the
        # other tasks' rows with it.
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--tasks", args.tasks, "--task", t,
               "--so", sos[t], "--copy-bps", repr(copy_bps), "--samples", str(args.samples)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.task_timeout)
            rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| ")]
            for row in rows:
                emit(row)
            if r.returncode != 0:
                tail = (r.stderr.strip().splitlines() or ["(no stderr)"])[-1]
                emit("| %s | — | — | %s | — | — | process exited %d: %s | — | — | — |" % (
                    t, op_name, r.returncode, tail[:160].replace("|", "/")))
        except subprocess.TimeoutExpired:
            emit("| %s | — | — | %s | — | — | timed out after %.0f s | — | — | — |" % (t, op_name, args.task_timeout))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

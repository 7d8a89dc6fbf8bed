#!/usr/bin/env python3
"""The shared harness of the PyTorch library yardsticks (tasks/<task>/vendor.py; trusted, never shown
to agents). A task's vendor.py names the PyTorch op a user would write for the task and calls
main(); `d2k verify-tasks` runs it in the same run as the task's kernels (docs/task-format.md,
"vendor") and reports L3 against it.

Protocol (as tasks/flash_attention_fwd/vendor.py): the request {"task", "seed", "workloads":
[{"name", "sizes"}...], "reference_so"?, "nvcc"?, "scratch"?} on stdin; one JSON line on stdout,
{"vendor": "<op> (torch <version>)", "workloads": [{"name", "median_s", "samples", "correct",
"mismatches", "elements", "detail"}...]}. The line is printed again after every workload with all
workloads so far, so a run killed at its deadline still leaves the workloads it finished (the last
complete line counts). Everything else the libraries print goes to stderr.

Per workload, the same standard as a vendor.cu (correctness against the task's reference, one
seed; timing as the kernels' samples are timed):
- inputs from task.json (beside the vendor.py): each argument's shape, dtype and init with the
  workload's overrides; the custom generators `csr` and `zipf_bytes` are rebuilt here with the same
  sizes and the same kind of structure (not the runner's exact bytes; both sides see the same ones);
- correctness: the task's reference (the request's "reference_so", the evaluator's trusted build;
  else reference.cu built here with nvcc: the request's "nvcc", $NVCC, /usr/local/cuda/bin/nvcc or
  PATH, and the task's flags) runs on the same inputs; every output of the op
  is compared with the reference's under the task's tolerance for the output's dtype
  (|got - want| <= atol + rtol * |want|, exact for integers without a tolerance, NaN/Inf must
  match in kind), as sandbox/eval/compare.cpp does. A workload that disagrees is reported
  "correct": false and verify-tasks leaves its time out;
- timing: 3 warm-up calls, then 20 samples, each one call between two CUDA events on the current
  stream after an L2 flush (a 256 MiB buffer write) and with the device idle (synchronized), as the
  runner times the kernels; the median.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

WARMUPS = 3
SAMPLES = 20
FLUSH_BYTES = 256 << 20


def fail(msg):
    print("vendor.py: " + msg, file=sys.stderr)
    sys.exit(1)


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
            if peek() != ("o", ")"):
                raise ValueError("missing ')' in %r" % expr)
            pos += 1
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

    v = additive()
    if pos != len(tokens):
        raise ValueError("trailing tokens in %r" % expr)
    return v


# --- inputs ---------------------------------------------------------------------------------------
TORCH_DTYPE = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16", "i32": "int32",
               "i64": "int64", "u8": "uint8",
               "u32": "int32"}  # same bytes; torch's uint32 lacks most CUDA ops (counts stay < 2^31)
FLOAT_DTYPES = ("f32", "f64", "bf16", "f16")


def make_csr(torch, rows, cols, nnz, params, dev):
    """Row pointers and sorted column indices with exactly nnz entries, shaped like the runner's csr
    generator (uniform / power_law / banded); duplicates within a row are possible (both sides see
    the same matrix)."""
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
    diff = nnz - int(lengths.sum())  # exactly nnz: spread the difference over the rows with room
    while diff != 0:
        step = 1 if diff > 0 else -1
        room = (lengths < cols) if step > 0 else (lengths > 0)
        idx = torch.nonzero(room).flatten()[: abs(diff)]
        if idx.numel() == 0:
            raise ValueError("csr: %d entries do not fit %d x %d" % (nnz, rows, cols))
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
    key, _ = torch.sort(row_of * cols + col)
    return row_ptr.to(torch.int32), (key % cols).to(torch.int32)


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
    raise ValueError("no generator for %r" % (init,))


def arg_dtype(task, w, name):
    for a in task["args"]:
        if a["name"] == name:
            return w.get("dtypes", {}).get(name, a["dtype"])
    raise KeyError(name)


def build_inputs(torch, task, w, dev):
    """T: tensors by argument name (inputs filled, outputs allocated); S: sizes and scalar values."""
    sizes = w["sizes"]
    inits = w.get("inits", {})
    T, S, csr = {}, dict(sizes), None
    for a in task["args"]:
        if a["role"] == "scalar":
            S[a["name"]] = eval_size(a["value"], sizes)
            continue
        shape = [eval_size(e, sizes) for e in a["shape"]]
        dt = getattr(torch, TORCH_DTYPE[arg_dtype(task, w, a["name"])])
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
    return T, S


# --- the task's reference ---------------------------------------------------------------------------
def find_nvcc(req):
    for c in (req.get("nvcc"), os.environ.get("NVCC"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    from shutil import which
    return which("nvcc")


def build_reference(task_dir, task, req):
    """The task's reference entry: the request's "reference_so" (verify-tasks passes the evaluator's
    trusted build), else reference.cu built here with the task's flags as the evaluator builds it."""
    import ctypes

    so = req.get("reference_so")
    if so and os.path.exists(so):
        lib = ctypes.CDLL(so)
        entry = getattr(lib, task["entry"])
        entry.restype = ctypes.c_int
        return entry
    nvcc = find_nvcc(req)
    if not nvcc:
        raise RuntimeError("nvcc not found (the request's \"nvcc\", $NVCC, /usr/local/cuda/bin/nvcc, PATH)")
    arch, extra = "-arch=sm_90", []
    for f in task.get("compile_flags", []):
        if f.startswith("-arch="):
            arch = f
        else:
            extra.append(f)
    scratch = req.get("scratch") or tempfile.mkdtemp(prefix="d2k-vendor-")
    os.makedirs(scratch, exist_ok=True)
    so = os.path.join(scratch, "%s-reference-%d.so" % (task["id"], os.getpid()))
    cmd = [nvcc, "-O3", arch, "-shared", "-Xcompiler", "-fPIC"] + extra + ["-o", so,
                                                                          os.path.join(task_dir, "reference.cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("nvcc failed on reference.cu: " + (r.stderr or r.stdout)[-600:])
    lib = ctypes.CDLL(so)
    entry = getattr(lib, task["entry"])
    entry.restype = ctypes.c_int
    return entry


def call_reference(torch, entry, task, T, S):
    import ctypes

    ctype = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "u8": ctypes.c_uint8,
             "f32": ctypes.c_float, "f64": ctypes.c_double}
    argv = []
    for a in task["args"]:
        if a["role"] == "scalar":
            argv.append(ctype[a["dtype"]](S[a["name"]]))
        else:
            argv.append(ctypes.c_void_p(T[a["name"]].data_ptr()))
    rc = entry(*argv, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    torch.cuda.synchronize()
    if rc != 0:
        raise RuntimeError("the reference returned %d" % rc)


def compare(torch, got, want, dtype, tol):
    """(mismatches, elements, detail) under compare.cpp's rule."""
    got = got.reshape(-1)
    want = want.reshape(-1)
    if got.numel() != want.numel():
        return want.numel(), want.numel(), "%d elements, the reference has %d" % (got.numel(), want.numel())
    atol, rtol = (tol.get("atol", 0.0), tol.get("rtol", 0.0)) if tol else (0.0, 0.0)
    if dtype not in FLOAT_DTYPES and atol == 0 and rtol == 0:
        bad = got.to(torch.int64) != want.to(torch.int64)
        worst = ""
    else:
        g, w = got.double(), want.double()
        finite = torch.isfinite(w)
        err = (g - w).abs()
        bad = torch.where(finite, ~torch.isfinite(g) | (err > atol + rtol * w.abs()),
                          ~((torch.isnan(w) & torch.isnan(g)) | (g == w)))
        worst = ", max |error| %.3g" % float(torch.where(finite & torch.isfinite(g), err, 0).max()) if g.numel() else ""
    n = int(bad.sum())
    detail = ""
    if n:
        i = int(torch.nonzero(bad)[0])
        detail = "%d of %d differ%s; first at %d: %r, reference %r" % (
            n, want.numel(), worst, i, float(got[i]), float(want[i]))
    return n, want.numel(), detail


# --- the run -------------------------------------------------------------------------------------------
def time_call(torch, call, flush):
    for _ in range(WARMUPS):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(SAMPLES):
        flush.fill_(1)
        # The device idle at the first event, as the runner times the kernels (runner_main.cpp,
        # sample()): queued behind the flush, the op's launch latency would go untimed.
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times), len(times)


def main(vendor_file, what, prepare):
    """prepare(torch, F, T, S) -> a callable that runs the library op on T's inputs and returns
    {output argument name: tensor}; whatever prepare does (constants, sparse views) is not timed."""
    result_fd = os.dup(1)  # only the result lines go to stdout
    os.dup2(2, 1)
    sys.stdout = os.fdopen(os.dup(2), "w")
    result = os.fdopen(result_fd, "w")
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:
        fail("cannot import torch: %s" % e)
    if not torch.cuda.is_available():
        fail("torch reports no CUDA device")
    try:
        req = json.load(sys.stdin)
    except Exception as e:
        fail("bad JSON on stdin: %s" % e)
    task_dir = os.path.dirname(os.path.abspath(vendor_file))
    with open(os.path.join(task_dir, "task.json")) as f:
        task = json.load(f)
    by_name = {w["name"]: w for w in task["workloads"]}
    try:
        reference = build_reference(task_dir, task, req)
    except Exception as e:
        fail(str(e))
    torch.manual_seed(int(req.get("seed", 1)))
    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    label = "%s (torch %s)" % (what, torch.__version__)
    out = []
    for wr in req.get("workloads", []):
        name = wr["name"]
        w = dict(by_name.get(name, {"name": name}))
        w["sizes"] = wr.get("sizes", w.get("sizes", {}))
        row = {"name": name}
        try:
            T, S = build_inputs(torch, task, w, dev)
            call = prepare(torch, F, T, S)
            got = call()
            torch.cuda.synchronize()
            call_reference(torch, reference, task, T, S)
            mismatches, elements, details = 0, 0, []
            for arg, tensor in got.items():
                dt = arg_dtype(task, w, arg)
                n, total, detail = compare(torch, tensor, T[arg], dt, task.get("tolerances", {}).get(dt))
                mismatches += n
                elements += total
                if detail:
                    details.append(arg + ": " + detail)
            del got
            median, samples = time_call(torch, call, flush)
            row.update({"median_s": median, "samples": samples, "correct": mismatches == 0,
                        "mismatches": mismatches, "elements": elements, "detail": "; ".join(details)[:400]})
        except Exception as e:  # one workload failing must not hide the others
            row.update({"median_s": 0, "samples": 0, "correct": False,
                        "detail": ("error: %s: %s" % (type(e).__name__, e))[:400]})
        out.append(row)
        T = S = call = None
        torch.cuda.empty_cache()
        result.write(json.dumps({"vendor": label, "workloads": out}) + "\n")
        result.flush()
    if not out:
        result.write(json.dumps({"vendor": label, "workloads": []}) + "\n")
    result.close()


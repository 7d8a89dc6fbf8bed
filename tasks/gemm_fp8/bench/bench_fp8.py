# gemm_fp8 probe: each .so variant and torch._scaled_mm (cuBLASLt fp8) on the task's large shapes,
# L2 flushed before each sample, median of 15 (cuda events). Correctness against torch's output.
import ctypes, sys, torch
sos = sys.argv[1:]
import os
shapes = [tuple(int(x) for x in t.split("x")) for t in os.environ["SHAPES"].split(",")] if os.environ.get("SHAPES") else [(8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (3001, 5003, 4112)]
fl = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
st = torch.cuda.current_stream()
def timeit(f, n=15):
    ts = []
    for i in range(n + 3):
        fl.fill_(i & 255)
        a = torch.cuda.Event(enable_timing=True); z = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record(); f(); z.record(); z.synchronize()
        if i >= 3: ts.append(a.elapsed_time(z) * 1e3)
    ts.sort(); return ts[len(ts) // 2]
libs = []
for s in sos:
    l = ctypes.CDLL(s); fn = l.d2k_gemm_fp8
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_void_p]; fn.restype = ctypes.c_int
    libs.append((s.split("/")[-1], fn))
for M, N, K in shapes:
    A = torch.randint(0, 126, (M, K), dtype=torch.uint8, device="cuda")
    B = torch.randint(0, 126, (N, K), dtype=torch.uint8, device="cuda")
    sa = torch.tensor([0.7], device="cuda"); sb = torch.tensor([1.3], device="cuda")
    fp8 = torch.float8_e4m3fn
    npad = (N + 15) // 16 * 16
    Bp = torch.cat([B, torch.zeros(npad - N, K, dtype=torch.uint8, device="cuda")]) if npad != N else B
    bt = Bp.view(fp8).t()
    av = A.view(fp8)
    ref = torch._scaled_mm(av, bt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)[:, :N].float()
    tv = timeit(lambda: torch._scaled_mm(av, bt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
    fl_ = 2.0 * M * N * K
    line = "%5dx%5dx%5d torch %.1fus %.0fTF" % (M, N, K, tv, fl_ / tv / 1e6)
    C = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    for name, fn in libs:
        C.fill_(float("nan"))
        call = lambda: fn(A.data_ptr(), B.data_ptr(), sa.data_ptr(), sb.data_ptr(), C.data_ptr(), M, N, K, st.cuda_stream)
        rc = call(); torch.cuda.synchronize()
        err = ((C.float() - ref).abs() / (ref.abs() + 1e-2)).max().item()
        t = timeit(call)
        line += " | %s rc=%d relerr %.3g %.1fus %.0fTF %.1f%%" % (name, rc, err, t, fl_ / t / 1e6, 100 * tv / t)
    print(line, flush=True)

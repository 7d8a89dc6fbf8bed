# decode_attention tolerance probe: for every workload of task.json (inputs from vendor_torch's
# build_inputs), the exact double result (rounded to bf16 as reference.cu does), and for each
# candidate output the smallest atol that passes it with rtol 1e-2: max(|got - want| - 0.01 |want|).
# Candidates: the vendor (gather + varlen_attn, FlashAttention: P rounded to bf16), kernel .so files
# (argv), a double evaluation with P rounded to bf16 (emulated FA), and simulated wrong kernels
# (one page of each sequence of >= 3 pages dropped; one token past each partly filled last page;
# the last page dropped for sequences of >= 2 pages).
import ctypes, json, os, sys
# Usage (GPU machine, PyTorch): python3 tasks/decode_attention/bench/tol_probe.py [KERNEL.so...]
here = os.path.dirname(os.path.abspath(__file__))
task_dir = os.path.dirname(here)
sys.path.insert(0, os.path.dirname(task_dir))
sys.path.insert(0, task_dir)
import torch, torch.nn.functional as F
import vendor_torch, vendor
task = json.load(open(os.path.join(task_dir, "task.json")))
libs = []
for s in sys.argv[1:]:
    fn = ctypes.CDLL(s).d2k_decode_attention
    fn.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int64] * 4 + [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    libs.append((os.path.basename(s)[:-3], fn))
dev = "cuda"
for w in task["workloads"]:
    torch.manual_seed(1234)
    T, S = vendor_torch.build_inputs(torch, task, w, dev)
    B, Hq, Hkv = S["B"], S["Hq"], S["Hkv"]
    G = Hq // Hkv
    ptr = T["page_ptr"].long().cpu().tolist(); last = T["last_len"].long().cpu().tolist()
    pages = T["page_idx"].long()
    q64 = T["q"].double()
    def attend(mode):
        out = torch.zeros(B, Hq, 128, dtype=torch.float64, device=dev)
        for b in range(B):
            n = ptr[b + 1] - ptr[b]
            if n == 0: continue
            L = 16 * (n - 1) + last[b]
            idx = pages[ptr[b]:ptr[b + 1]]
            k = T["k_cache"].index_select(0, idx).permute(1, 0, 2, 3).reshape(Hkv, -1, 128).double()
            v = T["v_cache"].index_select(0, idx).permute(1, 0, 2, 3).reshape(Hkv, -1, 128).double()
            keep = torch.arange(16 * n, device=dev) < L
            if mode == "drop_page" and n >= 3: keep[16 * (n // 2):16 * (n // 2 + 1)] = False
            if mode == "extra_token" and last[b] < 16: keep[L] = True
            if mode == "drop_last_page" and n >= 2: keep[16 * (n - 1):] = False
            k, v = k[:, keep], v[:, keep]
            qb = q64[b].view(Hkv, G, 128)
            s = torch.einsum("jgd,jtd->jgt", qb, k) / (128 ** 0.5)
            p = torch.exp(s - s.amax(-1, keepdim=True))
            if mode == "bf16_p": p = p.to(torch.bfloat16).double()
            out[b] = (torch.einsum("jgt,jtd->jgd", p, v) / p.sum(-1, keepdim=True)).reshape(Hq, 128)
        return out
    ref64 = attend("exact")
    want = ref64.to(torch.bfloat16).double()
    def need(got):  # the smallest atol passing got under rtol 1e-2, and failures at atol 1e-3 / 4e-3
        e = (got.double() - want).abs() - 0.01 * want.abs()
        return "%.2e (fail@1e-3 %d, @2e-3 %d, @4e-3 %d)" % (e.max().item(), int((e > 1e-3).sum()), int((e > 2e-3).sum()), int((e > 4e-3).sum()))
    lens = [16 * (ptr[b + 1] - ptr[b] - 1) + last[b] if ptr[b + 1] > ptr[b] else 0 for b in range(B)]
    line = ["%s B=%d G=%d lens min %d median %d max %d |want| median %.3g" % (w["name"], B, G, min(lens), sorted(lens)[B // 2], max(lens), want.abs().median().item())]
    try:
        call = vendor.prepare(torch, F, T, S)
        got = call()["out"]; torch.cuda.synchronize()
        line.append("  vendor(FA varlen): need atol " + need(got))
    except Exception as ex:
        line.append("  vendor error %s" % ex)
    for name, fn in libs:
        o = torch.empty_like(T["q"])
        rc = fn(T["q"].data_ptr(), T["k_cache"].data_ptr(), T["v_cache"].data_ptr(), T["page_ptr"].data_ptr(), T["page_idx"].data_ptr(), T["last_len"].data_ptr(), o.data_ptr(), B, Hq, Hkv, S["num_pages"], torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        line.append("  %s rc=%d: need atol %s" % (name, rc, need(o)))
    line.append("  double, P in bf16 (FA-like): need atol " + need(attend("bf16_p").to(torch.bfloat16)))
    for m in ("drop_page", "extra_token", "drop_last_page"):
        line.append("  WRONG %s: need atol %s" % (m, need(attend(m).to(torch.bfloat16))))
    print("\n".join(line), flush=True)
    T = S = None; torch.cuda.empty_cache()

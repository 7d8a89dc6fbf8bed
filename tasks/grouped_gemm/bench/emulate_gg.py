# Rewrites a grouped_gemm kernel for the CPU emulation (after cuda_cpu_prep.py has rewritten the
# launches): each inline-PTX statement becomes a call of the emulation in
# tasks/gemm_skinny/bench/cuda_cpu_extra.hpp or cuda_cpu_gg.hpp here, with the same operands.
# Prints to stdout.
import re
import sys

s = sys.stdin.read()
s = s.replace("extern __shared__ uint8_t smem_raw[];", "uint8_t* smem_raw = d2k_dyn_smem();")
s = s.replace("extern __shared__ __align__(128) uint8_t smem[];", "uint8_t* smem = d2k_dyn_smem();")


def match_paren(text, open_pos):
    depth = 0
    for q in range(open_pos, len(text)):
        if text[q] == "(":
            depth += 1
        elif text[q] == ")":
            depth -= 1
            if depth == 0:
                return q
    raise ValueError("unbalanced")


def operands(inner):
    ops, pos = [], 0
    rx = re.compile(r'"[=+]?[rlfhn]"\s*\(')
    while True:
        m = rx.search(inner, pos)
        if not m:
            return ops
        close = match_paren(inner, m.end() - 1)
        ops.append(inner[m.end():close].strip())
        pos = close + 1


out, i = [], 0
while True:
    j = s.find("asm volatile(", i)
    if j < 0:
        out.append(s[i:])
        break
    q = match_paren(s, j + len("asm volatile"))
    inner = s[j + len("asm volatile("):q]
    ops = operands(inner)
    if inner.lstrip().startswith('""'):
        rep = "(void)0"  # a compiler-ordering fence on the accumulators
    elif "mbarrier.init" in inner:
        rep = "emu_mbar_init(%s, %s)" % (ops[0], ops[1])
    elif "try_wait" in inner:
        rep = "%s = emu_mbar_test_sleep(%s, %s)" % (ops[0], ops[1], ops[2])
    elif "expect_tx" in inner:
        rep = "emu_mbar_expect_tx(%s, %s)" % (ops[0], ops[1])
    elif "mbarrier.arrive" in inner:
        rep = "emu_mbar_arrive(%s)" % ops[0]
    elif "cp.async.bulk.tensor.2d.global.shared" in inner:
        rep = "emu_tma_store_2d(%s)" % ", ".join(ops)
    elif "cp.async.bulk.tensor.2d" in inner:
        rep = "emu_tma_load_2d(%s)" % ", ".join(ops)
    elif "cp.async.bulk." in inner or "cp.async.commit_group" in inner or "cp.async.wait_group" in inner:
        rep = "(void)0"  # the emulated copies complete at once
    elif "cp.async.cg.shared.global" in inner:
        rep = "emu_cp_async(%s)" % ", ".join(ops)
    elif "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in inner:
        rep = "emu_ldmatrix_x4(%s)" % ", ".join(ops)
    elif "ld.shared.b32" in inner:
        rep = "%s = emu_lds32(%s)" % (ops[0], ops[1])
    elif "st.shared.b32" in inner:
        rep = "emu_sts32(%s, %s)" % (ops[0], ops[1])
    elif "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in inner:
        rep = "emu_mma_m16n8k16(%s)" % ", ".join(ops)
    elif "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in inner:
        assert len(ops) == 131, len(ops)
        rep = "emu_wgmma_m64n256k16(&(%s), %s, %s)" % (ops[0], ops[128], ops[129])
    elif "wgmma.wait_group" in inner:
        # The emulated MMAs complete at issue, thread by thread; on the GPU the warpgroup's MMA is
        # one operation, complete for all 128 threads at the wait (.sync.aligned).
        rep = "emu_named_bar(1000 + t_linear / 128)"
    elif "wgmma.fence" in inner or "wgmma.commit_group" in inner:
        rep = "(void)0"
    elif "bar.sync" in inner:
        rep = "emu_named_bar(%s)" % ops[0]
    elif "setmaxnreg" in inner or "fence." in inner or "prefetch.tensormap" in inner:
        rep = "(void)0"
    else:
        raise SystemExit("emulate_gg.py: no emulation for: " + inner[:120])
    out.append(s[i:j])
    out.append(rep)
    i = q + 1
sys.stdout.write("".join(out))

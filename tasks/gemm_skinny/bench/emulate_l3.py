# Rewrites tasks/gemm_skinny/experts/L3.cu for the CPU emulation (after cuda_cpu_prep.py has
# rewritten the launches): each inline-PTX statement becomes a call of the emulation in
# cuda_cpu_extra.hpp with the same operands. mbarriers get their PTX semantics (arrival count,
# transaction bytes, phase parity), the 2-D TMA copy writes the box with the 128-byte swizzle and
# zero fill, ld.shared reads the (swizzled) shared buffer, mma.sync m16n8k16 gathers the warp's
# fragments in the PTX ISA's layout and multiplies. The emulation encodes our reading of the PTX
# ISA; the hardware's agreement is checked on the H200 (`d2k verify-tasks`). Prints to stdout.
import re
import sys

s = sys.stdin.read()
s = s.replace("extern __shared__ unsigned char smem_raw[];", "unsigned char* smem_raw = d2k_dyn_smem();")
s = re.sub(r"__maxnreg__\([^)]*\)\s*", "", s)  # a register cap means nothing on the CPU


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
    """The expressions of the "c"(expr) operands of an asm statement's argument text, in order."""
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
    if "mbarrier.init" in inner:
        count = ops[1] if len(ops) > 1 else re.search(r"\],\s*(\d+);", inner).group(1)
        rep = "emu_mbar_init(%s, %s)" % (ops[0], count)
    elif "try_wait" in inner:
        rep = "%s = emu_mbar_test(%s, %s)" % (ops[0], ops[1], ops[2])
    elif "expect_tx" in inner:
        rep = "emu_mbar_expect_tx(%s, %s)" % (ops[0], ops[1])
    elif "mbarrier.arrive" in inner:
        rep = "emu_mbar_arrive(%s)" % ops[0]
    elif "cp.async.bulk.tensor.2d" in inner and "cache_hint" in inner:
        rep = "emu_tma_load_2d_hint(%s)" % ", ".join(ops)
    elif "cp.async.bulk.tensor.2d" in inner:
        rep = "emu_tma_load_2d(%s)" % ", ".join(ops)
    elif "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in inner:
        rep = "emu_ldsm4(%s)" % ", ".join(ops)
    elif "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in inner:
        rep = "emu_ldsm2(%s)" % ", ".join(ops)
    elif "bar.sync 1" in inner:
        rep = "emu_named_bar(%s)" % ops[0]
    elif "createpolicy" in inner:
        rep = "%s = 0" % ops[0]
    elif "ld.shared.b32" in inner:
        rep = "%s = emu_lds32(%s)" % (ops[0], ops[1])
    elif "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in inner:
        rep = "emu_mma_m16n8k16(%s)" % ", ".join(ops)
    elif "fence." in inner or "prefetch.tensormap" in inner:
        rep = "(void)0"
    else:
        raise SystemExit("emulate_l3.py: no emulation for: " + inner[:120])
    out.append(s[i:j])
    out.append(rep)
    i = q + 1
sys.stdout.write("".join(out))

#!/usr/bin/env python3
"""Prints the inline-asm wgmma wrappers used by tasks/flash_attention_fwd/experts/L3.cu (pasted between the GEN markers)."""

def regs(n, start=0):
    return ", ".join("%%%d" % (start + i) for i in range(n))

def outs(n, name="d"):
    return ", ".join('"+f"(%s[%d])' % (name, i) for i in range(n))

def ss(n):
    nacc = n // 2
    s = []
    s.append("// S (+)= A * B^T: m64n%dk16, A and B K-major bf16 in shared memory (descriptors da, db)," % n)
    s.append("// fp32 accumulators; kScaleD = 0 overwrites d (d = A*B), 1 accumulates.")
    s.append("template <int kScaleD>")
    s.append("__device__ __forceinline__ void wgmma_ss_n%d(float (&d)[%d], uint64_t da, uint64_t db) {" % (n, nacc))
    s.append('  asm volatile(')
    s.append('      "{\\n"')
    s.append('      ".reg .pred p;\\n"')
    s.append('      "setp.ne.b32 p, %%%d, 0;\\n"' % (nacc + 2))
    s.append('      "wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16 "' % n)
    s.append('      "{%s}, "' % regs(nacc))
    s.append('      "%%%d, %%%d, p, 1, 1, 0, 0;\\n"' % (nacc, nacc + 1))
    s.append('      "}\\n"')
    s.append('      : %s' % outs(nacc))
    s.append('      : "l"(da), "l"(db), "n"(kScaleD));')
    s.append("}")
    return "\n".join(s)

def rs(n):
    nacc = n // 2
    s = []
    s.append("// O += P * V: m64n%dk16, A (P) from registers in the mma.m16n8k16 A layout per warp, B (V)" % n)
    s.append("// MN-major ('transposed', imm-trans-b = 1) bf16 in shared memory; always accumulates.")
    s.append("__device__ __forceinline__ void wgmma_rs_n%d(float (&d)[%d], const uint32_t (&a)[4], uint64_t db) {" % (n, nacc))
    s.append('  asm volatile(')
    s.append('      "{\\n"')
    s.append('      ".reg .pred p;\\n"')
    s.append('      "setp.ne.b32 p, %%%d, 0;\\n"' % (nacc + 5))
    s.append('      "wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16 "' % n)
    s.append('      "{%s}, "' % regs(nacc))
    s.append('      "{%s}, %%%d, p, 1, 1, 1;\\n"' % (regs(4, nacc), nacc + 4))
    s.append('      "}\\n"')
    s.append('      : %s' % outs(nacc))
    s.append('      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));')
    s.append("}")
    return "\n".join(s)

print(ss(128))
print()
print(rs(128))
print()
print(rs(64))

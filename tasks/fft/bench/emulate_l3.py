# Rewrites tasks/fft/experts/L3.cu for the CPU emulation (after cuda_cpu_prep.py has rewritten the
# launches): each inline-PTX statement becomes its CPU meaning. The bulk async copies become memcpy
# into the block's shared buffer, the mbarrier operations disappear (the copy is complete when the
# issuing thread returns from memcpy and the block's __syncthreads follows), the try_wait loop
# completes at once. Everything else (the stages, the twiddle tables, the 128-bit output copy) runs
# unchanged. Prints to stdout.
import re
import sys

s = sys.stdin.read()
s = s.replace("extern __shared__ __align__(128) float2 sm[];",
              "float2* sm = reinterpret_cast<float2*>(d2k_dyn_smem());")
out, i = [], 0
while True:
    j = s.find("asm volatile(", i)
    if j < 0:
        out.append(s[i:])
        break
    depth, q = 0, j + len("asm volatile")
    while True:
        if s[q] == "(":
            depth += 1
        elif s[q] == ")":
            depth -= 1
            if depth == 0:
                break
        q += 1
    body = s[j:q]
    if "cp.async.bulk" in body:
        rep = "std::memcpy(d2k_dyn_smem() + dst + off, src + off, chunk)"
    elif "try_wait" in body:
        rep = "done = 1"
    else:
        rep = "(void)0"
    out.append(s[i:j])
    out.append(rep)
    i = q + 1
sys.stdout.write("".join(out))

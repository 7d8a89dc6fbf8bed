# Rewrites a task kernel (.cu) for cuda_cpu_shim.hpp: kernel launches become d2k_launch calls, dynamic
# shared memory a pointer to the shim's buffer, the lanemask_lt asm a shim call. Prints to stdout.
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'extern __shared__ (\w+) (\w+)\[\];', r'\1* \2 = reinterpret_cast<\1*>(d2k_dyn_smem());', s)
s = re.sub(r'asm\("mov\.u32 %0, %%lanemask_lt;" : "=r"\((\w+)\)\);', r'\1 = d2k_lanemask_lt();', s)
out = []; i = 0
while True:
    j = s.find('<<<', i)
    if j < 0: out.append(s[i:]); break
    # callee: walk back over identifier and template args
    k = j
    if s[k-1] == '>':
        depth = 0
        while True:
            k -= 1
            if s[k] == '>': depth += 1
            elif s[k] == '<':
                depth -= 1
                if depth == 0: break
    while k > 0 and (s[k-1].isalnum() or s[k-1] == '_'): k -= 1
    callee = s[k:j]
    e = s.index('>>>', j)
    cfg = [c.strip() for c in re.split(r',(?![^()]*\))', s[j+3:e])]
    while len(cfg) < 3: cfg.append('0')
    p = e + 3
    assert s[p] == '(', s[p:p+20]
    depth = 0; q = p
    while True:
        if s[q] == '(': depth += 1
        elif s[q] == ')':
            depth -= 1
            if depth == 0: break
        q += 1
    args = s[p+1:q]
    out.append(s[i:k])
    out.append('d2k_launch(dim3(%s), dim3(%s), %s, [&] { %s(%s); })' % (cfg[0], cfg[1], cfg[2], callee, args))
    i = q + 1
sys.stdout.write('#include "cuda_cpu_shim.hpp"\n' + ''.join(out))

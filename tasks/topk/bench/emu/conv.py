#!/usr/bin/env python3
"""Turns a task kernel file into C++ for the CPU emulation (cuda_runtime.h here): every
`kernel<<<grid, block, shm, stream>>>(args)` becomes `d2k_launch(dim3(grid), dim3(block), kernel, args)`.
Usage: conv.py IN.cu OUT.cpp"""
import re, sys
src = open(sys.argv[1]).read()
def split_top(s):
    out, depth, cur = [], 0, ''
    for ch in s:
        if ch in '(<[': depth += 1
        if ch in ')>]': depth -= 1
        if ch == ',' and depth == 0: out.append(cur); cur = ''
        else: cur += ch
    out.append(cur); return out
def rep(m):
    parts = split_top(m.group(2))
    return 'd2k_launch(dim3(%s), dim3(%s), %s, ' % (parts[0], parts[1], m.group(1))
src = re.sub(r'(\w+)<<<(.*?)>>>\(', rep, src, flags=re.S)
# dynamic shared memory: a function static of 512 KB (blocks do not overlap)
src = re.sub(r'extern __shared__ __align__\((\d+)\) (\w+) (\w+)\[\];', r'alignas(\1) static \2 \3[(512 << 10) / sizeof(\2)];', src)
src = src.replace('#pragma unroll', '').replace('__shared__ __align__(16)', 'alignas(16) static')
open(sys.argv[2], 'w').write(src)

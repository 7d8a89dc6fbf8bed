#!/usr/bin/env python3
"""Turns a task kernel file into C++ for the CPU emulation (cuda_runtime.h here): every
`kernel<<<grid, block, shm, stream>>>(args)` becomes `d2k_launch(dim3(grid), dim3(block), kernel, args)`.
Usage: conv.py IN.cu OUT.cpp [--arena]
--arena: each `__shared__ T name[dims];` (one name per line) becomes the block's own storage
(emu_shared), so that several blocks can run at once (EMU_BLOCKS); without it they are statics."""
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
if '--arena' in sys.argv[3:]:
    counter = [0]
    def arena(m):
        counter[0] += 1
        indent, ext, typ, name, dims = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        if ext and dims == '[]':
            return '%s%s* %s = emu_shared_dyn<%s>();' % (indent, typ, name, typ)
        return '%sauto& %s = *emu_shared<%s%s>(%d);' % (indent, name, typ, dims, counter[0])
    src = re.sub(r'^([ \t]*)(extern\s+)?__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)((?:\[[^\]]*\])*)\s*;',
                 arena, src, flags=re.M)
# dynamic shared memory: a function static of 512 KB (blocks do not overlap)
src = re.sub(r'extern __shared__ __align__\((\d+)\) (\w+) (\w+)\[\];', r'alignas(\1) static \2 \3[(512 << 10) / sizeof(\2)];', src)
src = src.replace('#pragma unroll', '').replace('__shared__ __align__(16)', 'alignas(16) static')
open(sys.argv[2], 'w').write(src)

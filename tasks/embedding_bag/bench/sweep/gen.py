#!/usr/bin/env python3
"""tasks-c: variant folders for the sweep, and the final experts + guidance from its measurements.

  gen.py sweep TASKS VT          write the sweep's variant task folders under VT
  gen.py final TASKS [VT.LOG]    pick each layer's fastest variant (geomean of the timed workloads,
                                 correct ones only; defaults without data) and write experts + guidance
Rule: every layer gets its own fastest measured parameter, nothing else (no ladder-driven choice).
"""
import json, math, os, re, shutil, sys

HERE = os.path.dirname(os.path.abspath(__file__))  # tpl/ beside it
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight", 16: "sixteen"}
# registers (ptxas, -O3 sm_90) and resident 256-thread blocks per SM of each variant
EB_REGS = {(4, 2): 32, (8, 1): 32, (8, 2): 40, (16, 2): 58, (16, 1): 42}
ST3_REGS = {2: 56, 3: 55, 4: 63, 6: 80}

def sub(s, old, new):
    """Replace the constant's definition `old` (its value whatever it is now) by `new`."""
    pat = re.escape(old.rsplit("=", 1)[0]) + r"= *\d+;"
    assert re.search(pat, s), old
    return re.sub(pat, new, s)

def eb2(src, r, c):
    s = sub(src, "constexpr int kRowsInFlight = 8;", "constexpr int kRowsInFlight = %d;" % r)
    return sub(s, "constexpr int kCols = 2;", "constexpr int kCols = %d;" % c)

def eb3(src, v1, r=8, c=2):
    s = eb2(src, r, c)
    return sub(s, "constexpr int kVecRowsOneChunk = 8;", "constexpr int kVecRowsOneChunk = %d;" % v1)

def st2(src, a):
    return sub(src, "constexpr int kAhead = 4;", "constexpr int kAhead = %d;" % a)

def st3(src, av, a=4):
    return sub(st2(src, a), "constexpr int kAheadV = 4;", "constexpr int kAheadV = %d;" % av)

def read(p):
    return open(p).read()

SWEEP = {
    "eb_x": ("embedding_bag", {"baseline.cu": ("L2", (4, 2)), "experts/L1.cu": ("L2", (8, 1)),
                               "experts/L2.cu": ("L2", (8, 2)), "experts/L3.cu": ("L3", 4)}),
    "eb_y": ("embedding_bag", {"baseline.cu": ("L2", (16, 2)), "experts/L1.cu": ("L2", (16, 1)),
                               "experts/L2.cu": ("L1", None), "experts/L3.cu": ("L3", 8)}),
    "st_x": ("stencil3d", {"baseline.cu": ("L2", 2), "experts/L1.cu": ("L2", 3),
                           "experts/L2.cu": ("L2", 4), "experts/L3.cu": ("L2", 6)}),
    "st_y": ("stencil3d", {"baseline.cu": ("L3", 2), "experts/L1.cu": ("L3", 3),
                           "experts/L2.cu": ("L3", 4), "experts/L3.cu": ("L3", 6)}),
}

def variant_src(tasks, task, layer, p):
    src = read(os.path.join(tasks, task, "experts", layer + ".cu"))
    if layer == "L1": return src
    if task == "embedding_bag": return eb2(src, *p) if layer == "L2" else eb3(src, p)
    return st2(src, p) if layer == "L2" else st3(src, p)

def sweep(tasks, vt):
    shutil.rmtree(vt, ignore_errors=True)
    for name, (task, slots) in SWEEP.items():
        d = os.path.join(vt, name)
        shutil.copytree(os.path.join(tasks, task), d, ignore=shutil.ignore_patterns("RESULTS.md", "bench", "vendor.py"))
        t = json.load(open(os.path.join(d, "task.json")))
        t["id"] = name
        t.pop("vendor", None)
        json.dump(t, open(os.path.join(d, "task.json"), "w"), indent=1)
        for f, (layer, p) in slots.items():
            open(os.path.join(d, f), "w").write(variant_src(tasks, task, layer, p))

def parse(log):
    """{(task, label): {workload: seconds}} for kernels that evaluated ok with every time correct."""
    res, cur = {}, None
    for line in open(log, errors="replace"):
        m = re.match(r"  evaluating (\S+) (\S+) on ", line)
        if m: cur = (m.group(1), m.group(2)); res[cur] = {}; continue
        if cur is None: continue
        if not line.startswith("    "): cur = None; continue  # past the kernel's block (the run's summary)
        m = re.match(r"    (\S+?)[:\s(]", line)
        if m and not line.startswith("      "):
            if m.group(1) != "ok": res[cur] = None
            continue
        m = re.match(r"      (\S+)\s+([0-9.]+) µs(.*)$", line)
        if m and res.get(cur) is not None:
            if "WRONG" in m.group(3): res[cur] = None
            else: res[cur][m.group(1)] = float(m.group(2)) * 1e-6
    return res

LABEL = {"baseline.cu": "baseline", "experts/L1.cu": "L1", "experts/L2.cu": "L2", "experts/L3.cu": "L3"}

def pick(res, task, layer, default):
    cands = {}
    for name, (t, slots) in SWEEP.items():
        if t != task: continue
        for f, (l, p) in slots.items():
            if l == layer and res.get((name, LABEL[f])): cands[p] = res[(name, LABEL[f])]
    if not cands: return default, "no data: default"
    common = set.intersection(*(set(v) for v in cands.values()))
    if not common: return default, "no common workloads: default"
    gm = {p: math.exp(sum(math.log(v[w]) for w in common) / len(common)) for p, v in cands.items()}
    best = min(gm, key=gm.get)
    return best, "geomean µs over %d workloads: " % len(common) + ", ".join("%s %.1f" % (p, gm[p] * 1e6) for p in sorted(gm, key=str))

def fmt(path, **kw):
    s = read(path)
    for k, v in kw.items(): s = s.replace("{" + k + "}", str(v))
    assert "{" not in re.sub(r"\{[^A-Z]", "", s) or True
    left = re.findall(r"\{[A-Z0-9]+\}", s)
    assert not left, left
    return s

def final(tasks, log):
    res = parse(log) if log and os.path.exists(log) else {}
    (r, c), why2 = pick(res, "embedding_bag", "L2", (8, 2))
    v1, why3 = pick(res, "embedding_bag", "L3", 8)
    a, whys2 = pick(res, "stencil3d", "L2", 4)
    av, whys3 = pick(res, "stencil3d", "L3", 4)
    out = []
    out.append("embedding_bag L2: rows in flight %d, columns per lane %d  (%s)" % (r, c, why2))
    out.append("embedding_bag L3: rows per step with one chunk %d  (%s)" % (v1, why3))
    out.append("stencil3d L2: planes ahead %d  (%s)" % (a, whys2))
    out.append("stencil3d L3: planes ahead %d  (%s)" % (av, whys3))
    e = os.path.join(tasks, "embedding_bag")
    src2, src3 = read(os.path.join(e, "experts/L2.cu")), read(os.path.join(e, "experts/L3.cu"))
    open(os.path.join(e, "experts/L2.cu"), "w").write(eb2(src2, r, c))
    open(os.path.join(e, "experts/L3.cu"), "w").write(eb3(src3, v1, r, c))
    regs = EB_REGS[(r, c)]
    occ = min(64, (65536 // (256 * ((regs + 7) // 8 * 8))) * 8)
    open(os.path.join(e, "guidance/L2.md"), "w").write(fmt(os.path.join(HERE, "tpl/eb_L2.md"),
        R=r, C=c, RC=r * c, SLICE=32 * c, SLICEB=64 * c, REGS=regs, OCC=occ, KB=occ * 32 * r * c * 2 // 1024,
        LANECOLS="" if c == 1 else " + 32 k for k < %d" % c,
        LINE=" (half a 128-byte line; the neighbouring slice's warp reads the other half)" if c == 1 else
             (": one whole 128-byte line" if c == 2 else ": %d whole 128-byte lines" % (c // 2))))
    open(os.path.join(e, "guidance/L3.md"), "w").write(fmt(os.path.join(HERE, "tpl/eb_L3.md"),
        RV1=v1, RV2=4, BV1=v1 * 16, BV2=4 * 32))
    s = os.path.join(tasks, "stencil3d")
    src2, src3 = read(os.path.join(s, "experts/L2.cu")), read(os.path.join(s, "experts/L3.cu"))
    open(os.path.join(s, "experts/L2.cu"), "w").write(st2(src2, a))
    open(os.path.join(s, "experts/L3.cu"), "w").write(st3(src3, av, a))
    occ3 = 65536 // (256 * ((ST3_REGS[av] + 7) // 8 * 8))
    open(os.path.join(s, "guidance/L2.md"), "w").write(fmt(os.path.join(HERE, "tpl/st_L2.md"),
        A=a, A1=a + 1, A2=a + 2, KB=8 * a,
        TWO=" Two planes ahead are not enough: with two, this kernel measured no faster than layer 1\n  on an H200 (2026-12-02), whose cached neighbours cost little there." if a > 2 else ""))
    open(os.path.join(s, "guidance/L3.md"), "w").write(fmt(os.path.join(HERE, "tpl/st_L3.md"),
        AV=av, AV1=av + 1, OCC=occ3, KBV=occ3 * 256 * 16 * av // 1024, KB2="%d KB" % (8 * a), REGS=ST3_REGS[av]))
    print("\n".join(out))

if __name__ == "__main__":
    if sys.argv[1] == "sweep": sweep(sys.argv[2], sys.argv[3])
    else: final(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)

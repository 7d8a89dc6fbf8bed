#!/usr/bin/env python3
"""Picks, per task, the fastest correct variant of a sweep (tasks/vector_add/bench/sweep/sweep.py over
the builds of build.sh) and makes it the task's experts/L3.cu: usage pick.py SWEEP_JSON VARIANTS_JSON
TASKS_DIR SO_DIR. Fastest = the highest worst-case share of the copy bandwidth over the task's large
workloads (those verify-tasks judges against the speed of light), ties to the variant listed first.
The picked variant's source (kept in SO_DIR by build.sh) becomes the L3, its -D switches written
into its `#define NAME value` defaults: the file then compiles as the variant was built. Prints the
table it chose from."""
import json
import re
import sys

LARGE = {
    "stencil3d": ["grid_512", "odd_508x509x503", "wide_slab_1000x601x97"],
    "moe_permute": ["qwen3_moe_8k_tokens", "deepseek_v3_4k_tokens", "deepseek_v3_16k_tokens",
                    "deepseek_v2_12345_tokens", "top2_16k_tokens_e64"],
}
sweep = json.load(open(sys.argv[1]))
variants = json.load(open(sys.argv[2]))
tasks_dir = sys.argv[3]
so_dir = sys.argv[4]
for task, large in LARGE.items():
    # probe_* builds are diagnostics (e.g. moe_permute/bench/scatter_probe.cu), never picked
    names = [k.split("__", 1)[1] for k in variants
             if k.startswith(task + "__") and "__probe" not in k and variants[k]["src"]]
    table = {}
    for r in sweep["runs"]:
        if r["task"] == task and r.get("mode", "idle") == "idle":
            table.setdefault(r["variant"], {})[r["workload"]] = r
    best, best_score = None, -1.0
    for v in names:
        rows = table.get(v, {})
        ok = bool(rows) and all(r["status"].startswith("rc=0 ") and "WRONG" not in r["status"] for r in rows.values())
        have = all(w in rows for w in large)
        score = min(rows[w]["pct_copy"] for w in large) if have else -1.0
        print("%-11s %-14s %s worst %.1f%%  %s" % (task, v, "ok " if ok else "BAD", score,
              "  ".join("%s %.1f" % (w, rows[w]["pct_copy"]) for w in large if w in rows)))
        if ok and have and score > best_score + 1e-9:
            best, best_score = v, score
    if best is None:
        print("%s: no correct variant measured; L3 left as it is" % task)
        continue
    l3 = "%s/%s/experts/L3.cu" % (tasks_dir, task)
    flags = variants[task + "__" + best]["flags"]
    src = open("%s/%s" % (so_dir, variants[task + "__" + best]["src"])).read()
    for name, value in re.findall(r"-D(\w+)=(\S+)", flags):
        src, n = re.subn(r"(?m)^#define %s \S+" % name, "#define %s %s" % (name, value), src)
        assert n == 1, (task, name)
    open(l3, "w").write(src)
    print("%s: chose %s (%s), worst large workload %.1f%% of copy" % (task, best, flags or "main's L3", best_score))

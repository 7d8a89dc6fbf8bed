#!/usr/bin/env python3
"""pick13.py SWEEP_JSON VARIANTS_JSON TASKS_DIR SO_DIR: per task, the correct variant with the best
worst-case share of copy bandwidth over the large workloads becomes TASKS_DIR/<task>/experts/L3.cu
(its -D switches written into its #define defaults). Prints the table."""
import json, re, sys
LARGE = {"stencil3d": ["grid_512", "odd_508x509x503", "wide_slab_1000x601x97"],
         "topk": ["qwen_512x151936_k50"]}
sweep = json.load(open(sys.argv[1])); variants = json.load(open(sys.argv[2]))
tasks_dir, so_dir = sys.argv[3], sys.argv[4]
for task, large in LARGE.items():
    names = [k.split("__", 1)[1] for k in variants if k.startswith(task + "__")]
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
        print("%-10s %-8s %s worst %.1f%% | %s" % (task, v, "ok " if ok else "BAD", score,
              "  ".join("%s %.1fus %.1f%%" % (w[:14], rows[w]["s"] * 1e6, rows[w]["pct_copy"]) for w in rows)), flush=True)
        if ok and have and score > best_score + 1e-9:
            best, best_score = v, score
    if best is None:
        print("%s: nothing picked" % task); continue
    flags = variants[task + "__" + best]["flags"]
    src = open("%s/%s" % (so_dir, variants[task + "__" + best]["src"])).read()
    for name, value in re.findall(r"-D(\w+)=(\S+)", flags):
        src, n = re.subn(r"(?m)^#define %s \S+" % name, "#define %s %s" % (name, value), src)
        assert n == 1, (task, name)
    open("%s/%s/experts/L3.cu" % (tasks_dir, task), "w").write(src)
    print("%s: chose %s (%s), worst %.1f%%" % (task, best, flags, best_score), flush=True)

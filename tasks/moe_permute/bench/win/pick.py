#!/usr/bin/env python3
"""Picks layer 3 from a sweep (tasks/vector_add/bench/sweep/sweep.py's sweep.json): among the
variants named in ELIGIBLE (cur = the committed expert; ring_b<B>_l<L> = bench/variants/L3_ring.cu
with RING_BPS=B, RING_LAG=L), the one whose worst large workload (>= 256 MiB moved) runs at the
highest fraction of the copy rate, every workload correct. Prints "<variant> <worst %>" per
variant and the pick last. Usage: pick.py sweep.json TASK_JSON"""
import json
import re
import sys

sys.path.insert(0, sys.argv[2].rsplit("/", 2)[0])
import vendor_torch as vt  # noqa: E402

runs = json.load(open(sys.argv[1]))["runs"]
task = json.load(open(sys.argv[2]))
large = {w["name"] for w in task["workloads"]
         if w.get("timed", True) and vt.eval_size(task["bytes"], w["sizes"]) >= 256 << 20}
by = {}
for r in runs:
    if r["task"] != "moe_permute" or r.get("mode") != "idle":
        continue
    v = by.setdefault(r["variant"], {"ok": True, "pct": {}})
    if "WRONG" in r["status"] or not r["status"].startswith("rc=0"):
        v["ok"] = False
    if r["workload"] in large:
        v["pct"][r["workload"]] = r["pct_copy"]
best = None
for name, v in sorted(by.items()):
    worst = min(v["pct"].values()) if len(v["pct"]) == len(large) else 0.0
    eligible = name == "cur" or re.fullmatch(r"ring_b\d+_l\d+", name) is not None
    print("%-16s ok=%s worst=%.1f%% %s" % (name, v["ok"], worst, "" if eligible else "(information only)"))
    if eligible and v["ok"] and (best is None or worst > best[1]):
        best = (name, worst)
print("PICK", best[0] if best else "cur")

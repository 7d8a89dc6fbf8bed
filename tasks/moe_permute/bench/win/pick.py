#!/usr/bin/env python3
"""Picks layer 3 from a sweep (tasks/vector_add/bench/sweep/sweep.py's sweep.json): a ring variant
(ring_b<B>_l<L>[_once] = bench/variants/L3_ring.cu with RING_BPS=B, RING_LAG=L[, RING_ONCE=1]) replaces the committed
expert (cur) only when, every workload correct, its worst large workload (>= 256 MiB moved) runs
at a higher fraction of the copy rate than cur's worst and within a point of the other variants'
(cur taken at its better
of two builds, `cur` timed first and `zz_cur_again` last: the first variant of each workload ran
slow in the window-1 sweep). Prints each variant's worst and the pick last.
Usage: pick.py sweep.json TASK_JSON"""
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
    name = "cur" if r["variant"] == "zz_cur_again" else r["variant"]
    v = by.setdefault(name, {"ok": True, "pct": {}})
    if "WRONG" in r["status"] or not r["status"].startswith("rc=0"):
        v["ok"] = False
    if r["workload"] in large:
        v["pct"][r["workload"]] = max(v["pct"].get(r["workload"], 0.0), r["pct_copy"])
ring, other, cur = None, 0.0, 0.0
for name, v in sorted(by.items()):
    worst = min(v["pct"].values()) if len(v["pct"]) == len(large) else 0.0
    is_ring = re.fullmatch(r"ring_b\d+_l\d+(_once)?", name) is not None
    print("%-16s ok=%s worst=%.1f%%" % (name, v["ok"], worst))
    if is_ring and v["ok"] and (ring is None or worst > ring[1]):
        ring = (name, worst)
    if name == "cur":
        cur = worst
    elif not is_ring:
        other = max(other, worst)
# A ring replaces cur when it beats cur's better build and is within a point of the best of the
# other designs timed beside it (those are information only: no guidance written for them).
print("PICK", ring[0] if ring and ring[1] > cur and ring[1] >= other - 1.0 else "cur")

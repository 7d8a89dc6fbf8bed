#!/usr/bin/env python3
"""grouped_gemm: the loop baseline (trusted, never shown to agents). The issue's target for L3 is
1.2x a loop of cuBLAS calls, the way a PyTorch MoE layer without a grouped GEMM computes its
experts: one torch.mm per non-empty expert, written into that expert's rows of Y. Same protocol
and timing as ../vendor.py (tasks/vendor_torch.py: JSON request on stdin, one JSON line per
workload on stdout; inputs from task.json; checked against reference.cu), so its median_s sits
next to the kernels' times of a `d2k verify-tasks` run:

    echo '{"task": "grouped_gemm", "seed": 1, "workloads": [{"name": "mixtral_8x7b_up_8e"}]}' |
        python3 tasks/grouped_gemm/bench/loop_torch.py

The group sizes are read on the host outside the timed call (a real layer pays a device-to-host
synchronisation for them: the loop is timed at its best).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TASK = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(TASK))
sys.path.insert(0, TASK)
import vendor_torch  # noqa: E402  (tasks/vendor_torch.py)
import vendor  # noqa: E402  (../vendor.py: prepare_loop)

if __name__ == "__main__":
    # main() reads task.json beside the file it is given: the task folder's vendor.py.
    vendor_torch.main(os.path.join(TASK, "vendor.py"), "loop of torch.mm per expert (cuBLAS)", vendor.prepare_loop)

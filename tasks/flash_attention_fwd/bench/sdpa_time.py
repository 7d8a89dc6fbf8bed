#!/usr/bin/env python3
"""Times torch SDPA on the timed flash_attention_fwd workloads the way harness.cu times a candidate
(3 warm-ups, N samples each after a 256 MiB L2 flush, CUDA events, median); prints RESULT lines.
Usage: python3 sdpa_time.py [reps]"""
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # no torch: nothing to compare with
    print("sdpa_time.py: no torch (%s)" % e)
    sys.exit(0)

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
shapes = [("b4_h32_s4096_d128", 4, 32, 4096, 128, False), ("b8_h16_s2048_d64_causal", 8, 16, 2048, 64, True),
          ("b2_h40_s4099_d128_causal", 2, 40, 4099, 128, True), ("b16_h12_s1023_d64", 16, 12, 1023, 64, False),
          ("b4_h32_s4096_d128_causal", 4, 32, 4096, 128, True)]
dev = torch.device("cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
print("torch", torch.__version__)
for name, b, h, s, d, causal in shapes:
    q, k, v = (torch.randn((b, h, s, d), device=dev, dtype=torch.bfloat16) for _ in range(3))
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        flush.fill_(1)
        a = torch.cuda.Event(enable_timing=True)
        z = torch.cuda.Event(enable_timing=True)
        a.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        z.record()
        z.synchronize()
        t.append(a.elapsed_time(z) * 1e3)
    med = statistics.median(t)
    fl = 4.0 * b * h * s * s * d / (2.0 if causal else 1.0)
    print("RESULT %-16s %-26s median_us=%10.1f min_us=%10.1f TFLOP/s=%6.1f" % ("torch_sdpa", name, med, min(t),
                                                                              fl / (med * 1e-6) / 1e12))
    sys.stdout.flush()
    del q, k, v

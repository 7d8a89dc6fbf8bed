"""tasks/vendor_torch.py times a library op as the runner times a kernel (no GPU needed): each sample
flushes the L2, then waits for the device to go idle, and only then records the first event; a call
queued behind the flush would leave its launch latency untimed while the kernels' samples include it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_vendor_torch():
    spec = importlib.util.spec_from_file_location("vendor_torch", REPO / "tasks" / "vendor_torch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeTorch:
    """Records the order of what time_call does on the device."""

    def __init__(self):
        self.log = []
        torch = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                torch.log.append("record")
                self.t = len(torch.log)

            def synchronize(self):
                torch.log.append("event_sync")

            def elapsed_time(self, other):
                return float(other.t - self.t)

        class Cuda:
            def synchronize(self):
                torch.log.append("sync")

        self.cuda = Cuda()
        self.cuda.Event = Event


class FakeFlush:
    def __init__(self, torch):
        self.torch = torch

    def fill_(self, v):
        self.torch.log.append("flush")


def test_each_sample_starts_on_an_idle_device():
    vt = load_vendor_torch()
    torch = FakeTorch()
    median, samples = vt.time_call(torch, lambda: torch.log.append("call"), FakeFlush(torch))
    assert samples == vt.SAMPLES
    timed = torch.log[torch.log.index("flush"):]  # after the warm-ups
    one = ["flush", "sync", "record", "call", "record", "event_sync"]
    assert timed == one * vt.SAMPLES
    assert median > 0

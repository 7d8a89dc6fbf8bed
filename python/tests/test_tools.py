"""The agent's tools (profile, sanitize, disassemble): action builders, the Dict space's samples,
and steps against a real server (disassemble needs no GPU; profile and sanitize answer no_gpu
without one and run on the H200: tests/tools/README.md)."""
from __future__ import annotations

import pytest

import d2k
from d2k import actions
from d2k.spaces import action_space


VECTOR_ADD = """#include <cstdint>
#include <cuda_runtime.h>
__global__ void add_kernel(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
"""


# Writes 256 elements past the end of y: memcheck must find it (written here, not in the repository).
OUT_OF_BOUNDS = """#include <cstdint>
#include <cuda_runtime.h>
__global__ void oob_kernel(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n + 256) y[i] = a[i < n ? i : 0] + b[i < n ? i : 0];
}
extern "C" int d2k_vector_add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  oob_kernel<<<(unsigned)((n + 256 + 255) / 256), 256, 0, s>>>(a, b, y, n);
  return (int)cudaGetLastError();
}
"""


def test_builders_and_normalize():
    assert actions.profile() == {"type": "profile"}
    assert actions.profile("pow2_64m", ["memory", "occupancy"]) == {
        "type": "profile", "workload": "pow2_64m", "sections": ["memory", "occupancy"]}
    assert actions.sanitize("racecheck") == {"type": "sanitize", "tool": "racecheck"}
    assert actions.disassemble("add_kernel", ptx=True, max_bytes=4096) == {
        "type": "disassemble", "kernel": "add_kernel", "sass": True, "ptx": True, "max_bytes": 4096}
    # Indices of the original six types are unchanged; the tools come after them.
    assert d2k.ACTION_TYPES[:6] == ("write_file", "edit", "patch", "compile", "evaluate", "submit")
    assert d2k.normalize_action({"type": 6, "workload": "", "sections": "memory, launch", "path": "x"}) == {
        "type": "profile", "workload": "", "sections": ["memory", "launch"]}
    assert d2k.normalize_action({"type": 8, "kernel": "k", "sass": 1, "ptx": 0, "max_bytes": 100}) == {
        "type": "disassemble", "kernel": "k", "sass": True, "ptx": False, "max_bytes": 100}


def test_space_samples_normalize_to_wire_actions():
    space = action_space()
    space.seed(3)
    for index in (6, 7, 8):  # profile, sanitize, disassemble: a sampled dict with that type
        sample = dict(space.sample())
        sample["type"] = index
        wire = d2k.normalize_action(sample)
        assert wire["type"] == d2k.ACTION_TYPES[index]
        assert set(wire) == {"type", *actions.ACTION_FIELDS[wire["type"]]}
        if wire["type"] == "profile":
            assert isinstance(wire.get("sections", []), list)


def test_disassemble_step_costs_its_steps_and_lists_kernels(server, task_id):
    with d2k.Client(server.endpoint) as client:
        session = client.reset(task_id, layer=1, max_steps=10)
        try:
            if task_id == "vector_add":  # a kernel to list (the starter has none)
                session.step(d2k.actions.write_file("kernel.cu", VECTOR_ADD))
            result = session.step(actions.disassemble())
            last = result.observation["last"]
            assert last["action"] == "disassemble"
            assert last["ok"] is True, last
            assert last["compile"]["ok"] is True
            d = last["disassembly"]
            assert set(d) >= {"kernels", "kernels_total", "matched", "truncated", "notes"}
            if d["kernels"]:  # cuobjdump found beside nvcc or on PATH
                assert all("registers" in k and "sass" in k for k in d["kernels"])
                if task_id == "vector_add":
                    assert d["kernels"][0]["demangled"].startswith("add_kernel(")
            else:
                assert any("cuobjdump" in n for n in d["notes"])
            steps_before = 1 if task_id == "vector_add" else 0
            assert result.observation["budget"]["steps_used"] == steps_before + 1  # tools.disassemble_steps
        finally:
            session.close()


def test_profile_and_sanitize_without_gpu(server, task_id):
    if server.has_gpu:
        pytest.skip("the server has a GPU: tests/tools/tools_gpu_test.cpp covers this on the H200")
    with d2k.Client(server.endpoint) as client:
        session = client.reset(task_id, layer=1)
        try:
            with pytest.raises(d2k.NoGpu):
                session.step(actions.profile())
            with pytest.raises(d2k.NoGpu):
                session.step(actions.sanitize())
            with pytest.raises(d2k.InvalidAction):
                session.step({"type": "disassemble", "ptx": "yes"})
        finally:
            session.close()


def test_profile_and_sanitize_on_gpu(server, task_id):
    """On a GPU machine (the H200: tests/tools/README.md): profile reports the agent's own kernel and
    only it, sanitize finds an out-of-bounds write, both as steps of an episode from the Python client."""
    if not server.has_gpu:
        pytest.skip("no GPU on this server")
    if task_id != "vector_add":
        pytest.skip("the kernels here are vector_add's")
    with d2k.Client(server.endpoint, timeout=300) as client:
        session = client.reset(task_id, layer=1, max_steps=20)
        try:
            session.step(d2k.actions.write_file("kernel.cu", VECTOR_ADD))
            last = session.step(actions.profile("odd_1m")).observation["last"]
            assert last["action"] == "profile" and last["ok"] is True, last
            p = last["profile"]
            assert p["workload"] == "odd_1m" and p["kernel_status"] == "ok"
            assert p["launches_total"] >= 1
            assert all(launch["kernel"].startswith("add_kernel") for launch in p["launches"]), p["launches"]
            assert p["launches"][0]["speed_of_light"]["dram_pct"] > 0

            session.step(d2k.actions.write_file("kernel.cu", OUT_OF_BOUNDS))
            last = session.step(actions.sanitize("memcheck")).observation["last"]
            assert last["action"] == "sanitize" and last["ok"] is True, last
            z = last["sanitize"]
            assert z["clean"] is False and z["findings"], z
            assert z["findings"][0]["kind"] == "invalid_access" and z["findings"][0]["access"] == "write"
        finally:
            session.close()

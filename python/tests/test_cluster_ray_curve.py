"""d2k.cluster on Ray with every socket beyond loopback (marker ``slow``; needs ``ray``).

A head plus 2 nodes with the resource ``d2k_host`` (compile-only servers). Each server binds this
host's non-loopback address, so its actor makes it CURVE keys listing the router's key; the
router binds beyond loopback too, with an allowlist of client keys. A listed client opens
sessions on both servers through the router; a client without keys gets nothing from the
router nor from a server.

    .venv-ray/bin/python -m pytest -q -m slow tests/test_cluster_ray_curve.py
"""
from __future__ import annotations

import signal
import time

import pytest

from conftest import server_binary, tasks_dir
from test_cluster_curve import non_loopback_host

ray = pytest.importorskip("ray", reason="needs ray (pip install './python[cluster]')")

import d2k  # noqa: E402
from d2k.cluster import ray_cluster as rc  # noqa: E402
from d2k.cluster.serve import write_key_pair  # noqa: E402

pytestmark = pytest.mark.slow


def test_cluster_with_curve_beyond_loopback(tmp_path):
    from ray.cluster_utils import Cluster

    signal.alarm(300)  # replaces conftest's 60 s guard: Ray nodes start slowly on a loaded machine
    binary = server_binary()
    if not binary.is_file():
        pytest.skip(f"d2k server binary not found at {binary} (set D2K_BIN)")
    host = non_loopback_host()
    keys = tmp_path / "keys"
    write_key_pair(str(keys), "router")
    write_key_pair(str(keys), "alice")
    allowed = tmp_path / "router_allowed"
    allowed.write_text((keys / "alice.pub").read_text())
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                             "object_store_memory": 80 << 20})
    for _ in range(2):
        cluster.add_node(num_cpus=0, resources={"d2k_host": 1}, object_store_memory=80 << 20)
    ray.init(address=cluster.address, namespace="d2k", log_to_driver=False)
    config = rc.ClusterConfig(name="curve", router_host=host, router_port=0, server_host=host,
                              router_key=str(keys / "router.key"), router_allowed_keys=str(allowed),
                              host_resource="d2k_host", binary=str(binary), tasks_dir=str(tasks_dir()),
                              state_dir=str(tmp_path / "servers"),
                              server_args=["--no-gpu", "--no-record", "--compile-workers", "1"],
                              poll_s=0.5, stats_interval_s=0.5, dead_after_s=20.0)
    try:
        endpoint = rc.up(config, detached=False, wait_servers=2, timeout_s=240)
        assert not endpoint.startswith("tcp://127.")
        deadline = time.monotonic() + 30
        while len(rc.status("curve")["router"]["servers"]) < 2:  # the router's view lags its members' by a poll
            assert time.monotonic() < deadline, rc.status("curve")
            time.sleep(0.2)
        status = rc.status("curve")
        assert status["router"]["curve"]["public_key"] == (keys / "router.pub").read_text().split()[0]
        servers = status["router"]["servers"]
        assert len(servers) == 2 and all(s["curve"] and host in s["endpoint"] for s in servers), servers
        with d2k.Client(endpoint, server_key=str(keys / "router.pub"), client_key=str(keys / "alice.key")) as alice:
            opened = [alice.request("reset", task="vector_add", layer=0, seed=i) for i in range(4)]
            assert sorted(r["server"] for r in opened) == sorted([s["name"] for s in servers] * 2)  # 2 each
            for r in opened:
                assert alice.step(r["session"], {"type": "write_file", "path": "kernel.cu",
                                                 "content": "// through CURVE twice\n"}).observation["step"] == 1
                alice.close_session(r["session"])
        for target in (endpoint, servers[0]["endpoint"]):  # no keys: neither answers
            with d2k.Client(target, timeout=1.0, policy=d2k.RetryPolicy(auto_retries=0)) as plain:
                with pytest.raises(d2k.ClientTimeout):
                    plain.hello("no keys")
    finally:
        try:
            rc.down("curve")
        except Exception:
            pass
        ray.shutdown()
        cluster.shutdown()

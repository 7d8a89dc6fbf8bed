"""d2k.cluster on a multi-node Ray cluster on this machine (marker ``slow``; needs ``ray``).

    .venv-cluster/bin/pip install 'ray>=2.40'      # or: pip install './python[cluster]'
    cd python && python -m pytest -q -m slow tests/test_cluster_ray.py

A head node plus 4 nodes with the custom resource ``d2k_host`` (no GPU here: compile-only servers),
one ``d2k serve`` per node placed by the cluster actor, 1,000 sessions through the router, one node
killed while steps are in flight: every request gets a reply or a typed ServerLost (nothing
replied is lost, no step runs twice), exactly the dead node's sessions end, the rest carry on,
new sessions go to the live servers, and a node that joins gets a server and new sessions.
Everything runs pinned to ONE core (sched_setaffinity before Ray starts; its processes inherit it).
"""
from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from conftest import server_binary, tasks_dir

ray = pytest.importorskip("ray", reason="needs ray (pip install './python[cluster]'); "
                                         "run with: python -m pytest -m slow tests/test_cluster_ray.py")

import d2k  # noqa: E402
from d2k.cluster import ray_cluster as rc  # noqa: E402

pytestmark = pytest.mark.slow

SESSIONS = int(os.environ.get("D2K_CLUSTER_SESSIONS", "1000"))
NODES = 4
TEST_LIMIT_S = 420


@pytest.fixture()
def one_core():
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


@pytest.fixture()
def ray_cluster(one_core, tmp_path):
    from ray.cluster_utils import Cluster

    signal.alarm(TEST_LIMIT_S)  # replaces conftest's 60 s guard: starting 5 Ray nodes on one core is slow
    binary = server_binary()
    if not binary.is_file():
        pytest.skip(f"d2k server binary not found at {binary} (set D2K_BIN)")
    fast_death = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
                  "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 << 20,
        "_system_config": fast_death})
    nodes = [cluster.add_node(num_cpus=0, resources={"d2k_host": 1}, object_store_memory=80 << 20)
             for _ in range(NODES)]
    ray.init(address=cluster.address, namespace="d2k", log_to_driver=False)
    config = rc.ClusterConfig(name="pytest", router_host="127.0.0.1", server_host="127.0.0.1",
                              host_resource="d2k_host", binary=str(binary), tasks_dir=str(tasks_dir()),
                              state_dir=str(tmp_path / "servers"),
                              server_args=["--no-gpu", "--no-record", "--compile-workers", "1",
                                           "--max-sessions", "600", "--idle-timeout", "3600"],
                              poll_s=0.5, stats_interval_s=0.5, dead_after_s=8.0)
    try:
        endpoint = rc.up(config, detached=False, wait_servers=NODES, timeout_s=240)
        yield cluster, nodes, endpoint, rc.get("pytest")
    finally:
        try:
            rc.down("pytest")
        except Exception:
            pass
        ray.shutdown()
        cluster.shutdown()


def node_of(status: dict, server_name: str) -> str:
    for m in status["members"]:
        if m["name"] == server_name:
            return m["node_id"]
    raise KeyError(server_name)


def test_cluster_1000_sessions_node_killed_mid_run(ray_cluster):
    cluster, nodes, endpoint, actor = ray_cluster
    asyncio.run(scenario(cluster, nodes, endpoint, actor))


async def scenario(cluster, nodes, endpoint, actor):
    loop = asyncio.get_running_loop()
    async with d2k.AsyncClient(endpoint) as client:
        hello = await client.hello()
        assert hello["config"]["cluster"]["servers"] == NODES

        # 1,000 sessions, placed by load: an even spread over the 4 servers.
        limit = asyncio.Semaphore(200)

        async def open_one(i):
            async with limit:
                reply = await client.request("reset", task="vector_add", layer=0, seed=i)
                return reply["session"], reply["server"]

        opened = await asyncio.gather(*(open_one(i) for i in range(SESSIONS)))
        server_of = dict(opened)
        per_server = {}
        for server in server_of.values():
            per_server[server] = per_server.get(server, 0) + 1
        assert len(per_server) == NODES
        assert max(per_server.values()) - min(per_server.values()) <= SESSIONS // 20, per_server

        status = ray.get(actor.status.remote())
        victim_server = sorted(per_server)[1]
        victim_node_id = node_of(status, victim_server)
        victim = next(n for n in nodes if n.node_id == victim_node_id)

        steps_ok = {sid: 0 for sid in server_of}
        lost: dict[str, int] = {}
        other_errors: list[str] = []

        async def drive(sid, rounds):
            for k in range(rounds):
                async with limit:
                    try:
                        r = await client.step(sid, {"type": "write_file", "path": "kernel.cu",
                                                    "content": f"// {sid} {k}\n"})
                    except d2k.ServerLost:
                        lost[sid] = steps_ok[sid]
                        return
                    except d2k.D2KError as err:  # anything else is a failure of the test
                        other_errors.append(f"{sid}: {err!r}")
                        return
                assert r.ok, r.last
                steps_ok[sid] += 1
                # Nothing lost, nothing run twice: the server's step count is ours.
                assert r.observation["step"] == steps_ok[sid], (sid, r.observation["step"], steps_ok[sid])

        # One step each, then 3 more while the victim's node is killed mid-run.
        await asyncio.gather(*(drive(sid, 1) for sid in server_of))
        assert not lost and not other_errors, (lost, other_errors[:5])
        run = asyncio.gather(*(drive(sid, 3) for sid in server_of))
        await asyncio.sleep(0.5)
        await loop.run_in_executor(None, lambda: cluster.remove_node(victim, allow_graceful=False))
        await run
        assert not other_errors, other_errors[:5]

        victims = {sid for sid, server in server_of.items() if server == victim_server}
        assert set(lost) == victims, (len(lost), len(victims))  # exactly the dead node's sessions
        for sid in set(server_of) - victims:
            assert steps_ok[sid] == 4
            obs = await client.observe(sid)  # the server agrees with every reply we got
            assert obs["observation"]["step"] == 4
        for sid in victims:  # once lost, always lost, typed
            with pytest.raises(d2k.ServerLost):
                await client.observe(sid)

        status = ray.get(actor.status.remote())
        assert any(e.get("node_id") == victim_node_id for e in status["lost"]), status["lost"]  # recorded, with why
        assert victim_node_id not in {m["node_id"] for m in status["members"]}

        # New sessions go to the live servers.
        fresh = await asyncio.gather(*(open_one(i) for i in range(60)))
        assert victim_server not in {server for _, server in fresh}

        # A node joins while the cluster runs: it gets a server, and new sessions (it is the least loaded).
        # (add_node sets signal handlers: main thread only; nothing is in flight now.)
        cluster.add_node(num_cpus=0, resources={"d2k_host": 1}, object_store_memory=80 << 20)
        await loop.run_in_executor(None, lambda: ray.get(actor.wait_servers.remote(NODES, 180)))
        joined = {m["name"] for m in ray.get(actor.status.remote())["members"] if m["state"] == "live"} - set(per_server)
        assert len(joined) == 1
        later = await asyncio.gather(*(open_one(i) for i in range(20)))
        assert {server for _, server in later} == joined

        for sid in list(set(server_of) - victims) + [s for s, _ in fresh + later]:
            await client.close_session(sid)

    # The cluster address: KernelEnv and KernelVectorEnv take "ray:<address>#<name>" for the router.
    address = f"ray:{cluster.address}#pytest"
    env = d2k.KernelEnv("vector_add", 0, endpoint=address)
    try:
        env.reset(seed=1)
        _, _, _, _, info = env.step({"type": "write_file", "path": "k.cu", "content": "// via ray:\n"})
        assert info["ok"] and info["step"] == 1
    finally:
        env.close()
    envs = d2k.KernelVectorEnv(3, "vector_add", 0, endpoint=address)
    try:
        envs.reset(seed=2)
        _, _, _, _, infos = envs.step([{"type": "compile"}] * 3)
        assert list(infos["step"]) == [1, 1, 1]
    finally:
        envs.close()

    # The command line's view, and a server that drains away while the cluster runs.
    import contextlib
    import io
    import json

    from d2k.cluster import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--address", cluster.address, "--name", "pytest", "status"]) == 0
    shown = json.loads(out.getvalue())
    assert sum(1 for m in shown["members"] if m["state"] == "live") == NODES
    leaving = next(m for m in shown["members"] if m["state"] == "live")
    with contextlib.redirect_stdout(io.StringIO()):
        cli.main(["--address", cluster.address, "--name", "pytest", "drain", leaving["node_id"]])
    deadline = time.monotonic() + 60
    while leaving["name"] in {x["name"] for x in ray.get(actor.status.remote())["router"]["servers"]}:
        assert time.monotonic() < deadline, "the drained server did not leave"
        await asyncio.sleep(0.5)

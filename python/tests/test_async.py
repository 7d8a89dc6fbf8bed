"""d2k.AsyncClient: many episodes at once on one socket."""
from __future__ import annotations

import asyncio

import pytest

import d2k


def test_many_concurrent_episodes(server, task_id):
    async def episode(client: d2k.AsyncClient, i: int) -> tuple[int, int]:
        async with await client.reset(task_id, layer=i % 4, seed=i) as s:
            r = await s.write_file(f"n{i}.h", f"// {i}\n")
            assert r.ok
            r = await s.edit(f"n{i}.h", f"{i}", f"{i + 1}")
            assert r.observation["files"][f"n{i}.h"] == f"// {i + 1}\n"
            assert s.observation["layer"] == i % 4
            return i, r.observation["step"]

    async def main():
        async with d2k.AsyncClient(server.endpoint) as client:
            hello = await client.hello()
            assert 1 in hello["protocol"]
            results = await asyncio.wait_for(
                asyncio.gather(*(episode(client, i) for i in range(16))), timeout=25)
            with pytest.raises(d2k.UnknownTask):
                await client.reset("no_such_task")
            return results

    results = asyncio.run(main())
    assert sorted(results) == [(i, 2) for i in range(16)]


def test_async_no_gpu_and_unknown_session(server, task_id):
    async def main():
        async with d2k.AsyncClient(server.endpoint) as client:
            with pytest.raises(d2k.UnknownSession):
                await client.observe("nope")
            if server.has_gpu:
                return
            async with await client.reset(task_id) as s:
                with pytest.raises(d2k.NoGpu):
                    await s.evaluate()

    asyncio.run(main())


def test_async_timeout_against_silent_endpoint():
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    async def main():
        async with d2k.AsyncClient(f"tcp://127.0.0.1:{port}", timeout=0.4,
                                   policy=d2k.RetryPolicy(resend_after=0.1)) as client:
            with pytest.raises(d2k.ClientTimeout):
                await client.hello()
    try:
        asyncio.run(main())
        ids = set()
        import msgpack
        while router.poll(0):
            ids.add(msgpack.unpackb(router.recv_multipart()[-1])["id"])
        assert len(ids) == 1
    finally:
        router.close()
        ctx.term()

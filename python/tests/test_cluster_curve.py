"""The cluster router with CURVE (issue 19 item 1 for d2k.cluster), real sockets, real `d2k serve`.

* Towards servers: compile-only servers bound beyond loopback (this host's non-loopback address,
  or 0.0.0.0 where it has none) run with CURVE keys (ServerProcess makes them) and list the
  router's public key; the router connects with its own key pair and serves sessions on them. A
  router whose key a server does not list gets nothing from it (the server is lost, a reset is
  refused typed), and a CURVE server cannot be added to a router without a key pair.
* Towards clients: a router bound beyond loopback with an allowlist lets listed keys in, not
  others (nor clients without keys), re-reads the allowlist when it changes, and binds each
  session to the key that opened it; without keys such a bind is refused with the set-up steps.
"""
from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest

from conftest import server_binary, tasks_dir

import d2k
from d2k.cluster import Router, ServerProcess
from d2k.cluster.serve import write_key_pair

SERVER_ARGS = ["--no-gpu", "--no-record", "--compile-workers", "1"]


def non_loopback_host() -> str:
    """An address of this host that is not loopback (the one its default route leaves by), else
    0.0.0.0 (every interface: the server calls that beyond loopback too)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9))  # no packet is sent: this only picks the source address
            address = s.getsockname()[0]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))  # and it is ours to bind
        if not address.startswith("127."):
            return address
    except OSError:
        pass
    return "0.0.0.0"


def _binary() -> str:
    binary = server_binary()
    if not binary.is_file():
        if os.environ.get("D2K_REQUIRE_SERVER") == "1":
            pytest.fail(f"d2k server binary not found at {binary} (set D2K_BIN)")
        pytest.skip(f"d2k server binary not found at {binary} (set D2K_BIN)")
    return str(binary)


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture()
def keys(tmp_path):
    folder = tmp_path / "keys"
    for name in ("router", "intruder", "alice", "bob", "mallory"):
        write_key_pair(str(folder), name)
    return folder


@pytest.fixture()
def remote_servers(tmp_path, keys):
    """Two compile-only servers bound beyond loopback, each listing the router's key only."""
    binary = _binary()
    host = non_loopback_host()
    router_public = (keys / "router.pub").read_text().split()[0]
    started = [ServerProcess(host, binary=binary, tasks_dir=str(tasks_dir()), state_dir=str(tmp_path / f"s{i}"),
                             extra_args=SERVER_ARGS, allow_keys=[router_public]) for i in range(2)]
    try:
        yield started
    finally:
        for srv in started:
            srv.stop()


def test_router_is_a_curve_client_of_servers_beyond_loopback(remote_servers, keys):
    a, b = remote_servers
    for srv in (a, b):
        assert srv.server_key and not srv.endpoint.startswith("tcp://127.")
        assert "--server-key" in srv.proc.args  # the server itself runs with CURVE
    # Without keys, nobody gets an answer from them (not even over loopback when bound to 0.0.0.0).
    with d2k.Client(a.endpoint, timeout=1.0, policy=d2k.RetryPolicy(auto_retries=0)) as plain:
        with pytest.raises(d2k.ClientTimeout):
            plain.hello("no keys")
    with Router("tcp://127.0.0.1:0", curve_key=str(keys / "router.key"), stats_interval_s=0.2,
                dead_after_s=None) as router:
        assert router.public_key == (keys / "router.pub").read_text().split()[0]
        router.add_server("a", a.endpoint, server_key=a.server_key)           # the key itself...
        router.add_server("b", b.endpoint, server_key=str(b.state_dir) + "/keys/server.pub")  # ...or its .pub
        router.run_in_thread()
        # The router's own hello and stats polls got through: both servers are known by their hello.
        wait_for(lambda: all(s["gpus"] == 0 and s["stats"] for s in router.status()["servers"]), 20,
                 "the router's stats polls to be answered over CURVE")
        assert all(s["curve"] for s in router.status()["servers"])
        with d2k.Client(router.endpoint) as client:  # the client-side leg is plain loopback here
            assert client.hello()["config"]["cluster"]["servers"] == 2
            sessions = [client.reset("vector_add", 0, seed=i) for i in range(6)]
            assert sorted(router.session_server(s.id) for s in sessions) == ["a"] * 3 + ["b"] * 3
            for s in sessions:
                r = s.write_file("kernel.cu", "__global__ void k() {}\n")
                assert r.ok and r.observation["step"] == 1
                r = s.compile()
                assert r.ok, r.last
                s.close()
    # A server's sessions opened through the router belong to the router's key: another key
    # (here a client listed later on purpose) sees nothing of them.


def test_router_with_an_unlisted_key_gets_nothing(remote_servers, keys):
    a, _ = remote_servers
    with Router("tcp://127.0.0.1:0", curve_key=str(keys / "intruder.key"), stats_interval_s=0.2,
                dead_after_s=2.0) as router:
        router.add_server("a", a.endpoint, server_key=a.server_key)
        router.run_in_thread()
        wait_for(lambda: router.status()["servers"] and router.status()["servers"][0]["state"] == "lost", 30,
                 "the silent server to be declared lost")
        with d2k.Client(router.endpoint, policy=d2k.RetryPolicy(auto_retries=0)) as client:
            with pytest.raises(d2k.Capacity):  # no server left to place it on: typed, retryable
                client.request("reset", task="vector_add", layer=0)
    assert a.alive()  # refused at the handshake: the server carries on
    assert "is not in the allowed keys" in wait_for(lambda: (lambda t: t if "is not in the allowed keys" in t
                                                             else None)(a.tail(20000)), 20, "the refusal logged")


def test_curve_server_needs_a_router_key_pair(remote_servers):
    a, _ = remote_servers
    with Router("tcp://127.0.0.1:0", dead_after_s=None) as router:
        with pytest.raises(ValueError, match="curve_key"):
            router.add_server("a", a.endpoint, server_key=a.server_key)


def test_router_front_with_curve_clients(tmp_path, keys):
    binary = _binary()
    allowed = tmp_path / "router_allowed"
    allowed.write_text("# the router's clients\n" + (keys / "alice.pub").read_text())
    host = non_loopback_host()
    # Beyond loopback without keys: refused, saying how to set them up.
    with pytest.raises(ValueError, match="(?s)without authentication.*d2k keys server"):
        Router(f"tcp://{host}:0")
    with pytest.raises(ValueError, match="needs curve_key"):
        Router(f"tcp://{host}:0", allowed_keys=str(allowed))
    srv = ServerProcess("127.0.0.1", binary=binary, tasks_dir=str(tasks_dir()), state_dir=str(tmp_path / "s"),
                        extra_args=SERVER_ARGS)
    try:
        with Router(f"tcp://{host}:0", curve_key=str(keys / "router.key"), allowed_keys=str(allowed),
                    stats_interval_s=0.2, dead_after_s=None) as router:
            router.add_server("s", srv.endpoint, srv.hello)
            router.run_in_thread()
            pub = str(keys / "router.pub")

            def client(name: str | None, **kw) -> d2k.Client:
                if name is None:
                    return d2k.Client(router.endpoint, timeout=1.0, policy=d2k.RetryPolicy(auto_retries=0))
                return d2k.Client(router.endpoint, server_key=pub, client_key=str(keys / f"{name}.key"), **kw)

            with client("alice") as alice:
                assert alice.hello()["config"]["cluster"]["servers"] == 1
                s = alice.reset("vector_add", 1)
                assert s.write_file("notes.h", "// alice").ok
                for name in ("mallory", None):  # an unlisted key, and no key at all: no answer
                    kw = {} if name is None else {"timeout": 1.0, "policy": d2k.RetryPolicy(auto_retries=0)}
                    with client(name, **kw) as other:
                        with pytest.raises(d2k.ClientTimeout):
                            other.hello("refused")
                assert router.status()["router"].get("refused_keys", 0) >= 1
                # bob is listed while the router runs: the allowlist is re-read when it changes.
                with open(allowed, "a") as f:
                    f.write((keys / "bob.pub").read_text())
                wait_for(lambda: router.status()["curve"]["allowed_keys"] == 2, 10, "the allowlist reload")
                with client("bob") as bob:
                    assert bob.hello()["server"] == "d2k-gym"
                    # alice's session is bound to her key: for bob it does not exist.
                    with pytest.raises(d2k.UnknownSession):
                        bob.observe(s.id)
                    with pytest.raises(d2k.UnknownSession):
                        bob.request("close", session=s.id)
                    mine = bob.reset("vector_add", 1)
                    mine.close()
                assert alice.observe(s.id)["observation"]["files"]["notes.h"] == "// alice"
                # A reset resent by alice from a NEW socket with the same id is the same request.
                first = alice.request_many([("reset", {"task": "vector_add", "layer": 1, "seed": 3})])[0]
                with client("alice") as again:
                    again._ids._next = alice._ids._next - 1
                    second = again.request_many([("reset", {"task": "vector_add", "layer": 1, "seed": 3})])[0]
                assert first["session"] == second["session"]
                alice.request("close", session=first["session"])
                s.close()

            async def through_async() -> str:
                async with d2k.AsyncClient(router.endpoint, server_key=pub,
                                           client_key=str(keys / "alice.key")) as c:
                    return (await c.hello())["server"]
            assert asyncio.run(through_async()) == "d2k-gym"
            assert router.status()["router"].get("internal_errors", 0) == 0
    finally:
        srv.stop()

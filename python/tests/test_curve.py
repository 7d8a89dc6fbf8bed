"""CURVE from Python (issue 19.1): the sync and async clients with keys, unknown keys refused,
sessions bound to the key that opened them, a non-loopback bind refused without keys, and the
same over a real non-loopback address: a veth pair between two network namespaces that the test
makes and removes itself, with a raw capture of the traffic that must hold no plaintext.

The namespace test needs root and iproute2's ``ip``; it skips cleanly otherwise."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import d2k
from conftest import REPO, free_port, server_binary, tasks_dir


def _binary() -> Path:
    binary = server_binary()
    if not binary.is_file():
        if os.environ.get("D2K_REQUIRE_SERVER") == "1":
            pytest.fail(f"d2k server binary not found at {binary} (set D2K_BIN)")
        pytest.skip(f"d2k server binary not found at {binary} (set D2K_BIN)")
    return binary


def _keys(binary: Path, folder: Path) -> Path:
    for args in (["server"], ["client", "--name", "alice"], ["client", "--name", "bob"],
                 ["client", "--name", "mallory"]):
        subprocess.run([str(binary), "keys", *args, str(folder)], check=True, capture_output=True)
    allowed = folder / "allowed_keys"
    allowed.write_text((folder / "alice.pub").read_text() + (folder / "bob.pub").read_text())
    return allowed


def _serve(binary: Path, workdir: Path, endpoint: str, keys: Path | None,
           prefix: list[str] | None = None) -> subprocess.Popen:
    args = [*(prefix or []), str(binary), "serve", "--no-gpu", "--endpoint", endpoint,
            "--tasks", str(tasks_dir()), "--state-dir", str(workdir / "state"),
            "--compile-workers", "1", "--events", "none"]
    if keys is not None:
        args += ["--server-key", str(keys / "server.key"), "--allowed-keys", str(keys / "allowed_keys")]
    log = open(workdir / "server.log", "ab")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_hello(endpoint: str, keys: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    with d2k.Client(endpoint, timeout=0.5, server_key=str(keys / "server.pub"),
                    client_key=str(keys / "alice.key")) as c:
        while time.monotonic() < deadline:
            assert proc.poll() is None, "d2k serve exited"
            try:
                c.hello("pytest")
                return
            except d2k.ClientTimeout:
                continue
    raise AssertionError("d2k serve with CURVE did not answer")


@pytest.fixture(scope="module")
def curve_server(tmp_path_factory):
    binary = _binary()
    work = tmp_path_factory.mktemp("d2k-curve")
    keys = work / "keys"
    _keys(binary, keys)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    proc = _serve(binary, work, endpoint, keys)
    try:
        _wait_hello(endpoint, keys, proc)
        yield endpoint, keys
    finally:
        _stop(proc)


def test_listed_key_served_unknown_key_refused(curve_server):
    endpoint, keys = curve_server
    with d2k.Client(endpoint, server_key=str(keys / "server.pub"), client_key=str(keys / "bob.key")) as c:
        assert c.hello("pytest")["server"] == "d2k-gym"
    for client_key in (keys / "mallory.key", None):
        kwargs = {"server_key": str(keys / "server.pub"), "client_key": str(client_key)} if client_key else {}
        with d2k.Client(endpoint, timeout=1.0, **kwargs) as c:
            with pytest.raises(d2k.ClientTimeout):
                c.hello("pytest")


def test_session_bound_to_its_key_and_keys_from_the_environment(curve_server, monkeypatch):
    endpoint, keys = curve_server
    monkeypatch.setenv("D2K_SERVER_KEY", str(keys / "server.pub"))
    monkeypatch.setenv("D2K_CLIENT_KEY", str(keys / "alice.key"))
    with d2k.Client(endpoint) as alice:
        session = alice.reset("vector_add", layer=1)
        session.write_file("notes.h", "// alice")
        with d2k.Client(endpoint, client_key=str(keys / "bob.key")) as bob:
            with pytest.raises(d2k.UnknownSession):
                bob.observe(session.id)
        assert alice.observe(session.id)["observation"]["files"]["notes.h"] == "// alice"
        session.close()


def test_async_client_with_keys(curve_server):
    endpoint, keys = curve_server

    async def go():
        async with d2k.AsyncClient(endpoint, server_key=str(keys / "server.pub"),
                                   client_key=str(keys / "alice.key")) as c:
            return (await c.hello())["server"]
    assert asyncio.run(go()) == "d2k-gym"


def test_half_configured_keys_are_an_error(tmp_path):
    with pytest.raises(ValueError, match="D2K_SERVER_KEY"):
        d2k.Client("tcp://127.0.0.1:1", client_key=str(tmp_path / "x.key"))


def test_non_loopback_bind_refused_without_keys(tmp_path):
    binary = _binary()
    proc = _serve(binary, tmp_path, "tcp://0.0.0.0:0", None)
    assert proc.wait(timeout=60) != 0
    log = (tmp_path / "server.log").read_text()
    assert "refusing to serve on tcp://0.0.0.0:0 without authentication" in log
    assert "d2k keys server" in log


# --- over a veth pair between two network namespaces ----------------------------------------

_CLIENT = textwrap.dedent("""
    import json, sys, time
    import d2k
    endpoint, server_pub, client_key, marker, mode = sys.argv[1:6]
    out = {}
    with d2k.Client(endpoint, timeout=1.0 if mode == "refused" else 2.0,
                    server_key=server_pub, client_key=client_key) as c:
        if mode == "refused":
            try:
                c.hello("netns")
                out["answered"] = True
            except d2k.ClientTimeout:
                out["answered"] = False
        else:
            deadline = time.monotonic() + 60
            while True:
                try:
                    c.hello("netns")
                    break
                except d2k.ClientTimeout:
                    if time.monotonic() > deadline:
                        raise
            s = c.reset("vector_add", layer=1)
            s.write_file("notes.h", marker)
            out["echoed"] = c.observe(s.id)["observation"]["files"]["notes.h"] == marker
            s.close()
    print(json.dumps(out))
""")

_CAPTURE = textwrap.dedent("""
    import os, socket, struct, sys
    iface, path, stop = sys.argv[1:4]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
    s.bind((iface, 0))
    s.settimeout(0.2)
    with open(path, "wb") as out:
        open(path + ".ready", "w").close()
        while not os.path.exists(stop):
            try:
                frame = s.recv(65536)
            except socket.timeout:
                continue
            out.write(struct.pack("<I", len(frame)) + frame)
            out.flush()
""")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture()
def netns_pair():
    if os.geteuid() != 0:
        pytest.skip("the network-namespace test needs root (it makes a veth pair)")
    if shutil.which("ip") is None:
        pytest.skip("the network-namespace test needs iproute2's `ip`")
    tag = secrets.token_hex(3)
    ns_a, ns_b, veth_a, veth_b = f"d2kA{tag}", f"d2kB{tag}", f"d2kva{tag}", f"d2kvb{tag}"
    net = f"10.231.{secrets.randbelow(250) + 1}"
    try:
        try:
            _ip("netns", "add", ns_a)
            _ip("netns", "add", ns_b)
            _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
            _ip("link", "set", veth_a, "netns", ns_a)
            _ip("link", "set", veth_b, "netns", ns_b)
            for ns, dev, host in ((ns_a, veth_a, 1), (ns_b, veth_b, 2)):
                _ip("-n", ns, "addr", "add", f"{net}.{host}/30", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:  # no CAP_NET_ADMIN, no veth: not this host
            pytest.skip(f"cannot make network namespaces and a veth pair here: {' '.join(e.cmd)}: "
                        f"{e.stderr.decode(errors='replace').strip()}")
        yield ns_a, ns_b, veth_b, f"{net}.1"
    finally:
        for ns in (ns_a, ns_b):  # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_curve_over_a_veth_pair_in_network_namespaces(netns_pair, tmp_path):
    ns_a, ns_b, veth_b, server_ip = netns_pair
    binary = _binary()
    keys = tmp_path / "keys"
    _keys(binary, keys)
    endpoint = f"tcp://{server_ip}:5555"
    in_a, in_b = ["ip", "netns", "exec", ns_a], ["ip", "netns", "exec", ns_b]

    # Without keys the server refuses the non-loopback address.
    refused = _serve(binary, tmp_path, endpoint, None, prefix=in_a)
    assert refused.wait(timeout=60) != 0
    assert "without authentication" in (tmp_path / "server.log").read_text()

    capture_path, stop = tmp_path / "capture.bin", tmp_path / "capture.stop"
    capture = subprocess.Popen([*in_b, sys.executable, "-c", _CAPTURE, veth_b, str(capture_path), str(stop)])
    server = _serve(binary, tmp_path, endpoint, keys, prefix=in_a)
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    env.pop("D2K_SERVER_KEY", None)
    env.pop("D2K_CLIENT_KEY", None)
    marker = "PLAINTEXT_MARKER_" + secrets.token_hex(8)
    control = "CAPTURE_CONTROL_" + secrets.token_hex(8)
    try:
        deadline = time.monotonic() + 30
        while not Path(str(capture_path) + ".ready").exists():
            assert capture.poll() is None and time.monotonic() < deadline, "the capture did not start"
            time.sleep(0.05)

        def client(key: str, mode: str) -> dict:
            done = subprocess.run([*in_b, sys.executable, "-c", _CLIENT, endpoint, str(keys / "server.pub"),
                                   str(keys / key), marker, mode],
                                  env=env, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr[-3000:]
            return json.loads(done.stdout.strip().splitlines()[-1])

        assert client("alice.key", "work") == {"echoed": True}      # a listed key works
        assert client("mallory.key", "refused") == {"answered": False}  # an unknown key is refused
        # A control: bytes sent in clear over the same link do show in the capture.
        subprocess.run([*in_b, sys.executable, "-c",
                        "import socket, sys; s = socket.create_connection((sys.argv[1], 5555), timeout=10); "
                        "s.sendall(sys.argv[2].encode()); s.close()", server_ip, control],
                       check=True, timeout=60)
        time.sleep(0.5)  # let the capture read the last frames
    finally:
        stop.touch()
        capture.wait(timeout=30)
        _stop(server)
    assert server.returncode == 0
    captured = capture_path.read_bytes()
    # The capture sees what goes in clear, and saw the ZeroMQ connection (its greeting names the
    # mechanism in clear) ...
    assert control.encode() in captured
    assert b"CURVE" in captured
    assert len(captured) > 4096
    # ... and none of what went over it: not the agent's source, not the task, not the ops.
    for plain in (marker.encode(), b"vector_add", b"write_file", b"observe", b"notes.h"):
        assert plain not in captured, plain

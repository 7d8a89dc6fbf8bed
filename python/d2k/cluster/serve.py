"""One ``d2k serve`` process on this host, as the cluster starts it (no Ray needed here).

The process is tied to its parent: it gets SIGTERM when the process that started it dies
(``PR_SET_PDEATHSIG``), so a Ray actor killed with its node never leaves a server behind.

Bound beyond loopback, the server needs CURVE (issue 19 item 1): ServerProcess then makes the
server's key pair in its state folder (``keys/server.key``, ``server.pub``), an allowlist of the
keys given in ``allow_keys`` (the router's public key) plus a supervisor key of its own (to wait
for ``hello``), and starts ``d2k serve --server-key ... --allowed-keys ...``; ``server_key`` is the
public key that clients (the router: ``Router.add_server(..., server_key=...)``) need.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..client import Client
from ..errors import ClientTimeout
from ..local import find_server_binary
from ..registration import default_tasks_dir
from ..wire import read_public_key

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the actor's stop() is then the only way down


def write_key_pair(folder: str, name: str) -> tuple[str, str]:
    """A CURVE key pair as ``d2k keys`` writes it: FOLDER/NAME.key (public and secret lines,
    0600) and FOLDER/NAME.pub (the public key and the name: one allowlist line)."""
    import zmq
    public, secret = (k.decode() for k in zmq.curve_keypair())
    Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
    key_path = os.path.join(folder, f"{name}.key")
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(f"# d2k CURVE key pair '{name}': keep it secret\npublic {public}\nsecret {secret}\n")
    Path(folder, f"{name}.pub").write_text(f"{public} {name}\n", encoding="ascii")
    return public, secret


def is_loopback_host(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``d2k serve --endpoint tcp://HOST:PORT`` with its own state folder, waited for until it
    answers ``hello``.

    Args:
        host: the address to bind (the node's address in a cluster; a non-loopback address needs
            the server's CURVE keys, passed in ``extra_args``: docs/multi-tenant.md).
        port: 0 picks a free one.
        binary, tasks_dir: default as the embedded server (``$D2K_BIN``... and the default tasks).
        state_dir: compile cache, episode logs; default a new temporary folder.
        extra_args: more ``d2k serve`` options (``--no-gpu``, ``--max-sessions``...); not the
            CURVE ones: ServerProcess makes the keys (see ``curve``).
        curve: serve with CURVE keys made here; default: when ``host`` is not loopback (a bind
            beyond loopback without keys is refused by the server).
        allow_keys: client public keys (Z85 strings or .pub files) that may connect with CURVE,
            e.g. the router's ``Router.public_key``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, binary: str | None = None,
                 tasks_dir: str | None = None, state_dir: str | None = None,
                 extra_args: Sequence[str] = (), start_timeout_s: float = 120.0,
                 curve: bool | None = None, allow_keys: Sequence[str] = ()) -> None:
        if any(a.split("=", 1)[0] in ("--server-key", "--allowed-keys") for a in extra_args):
            raise ValueError("ServerProcess makes the server's CURVE keys itself: pass allow_keys "
                             "(the client public keys to let in), not --server-key/--allowed-keys")
        self.binary = str(binary or find_server_binary())
        tasks = tasks_dir or default_tasks_dir()
        self.tasks_dir = str(tasks) if tasks else None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="d2k-cluster-")
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(host)
        self.endpoint = f"tcp://{host}:{self.port}"
        self.log_path = os.path.join(self.state_dir, "server.log")
        args = [self.binary, "serve", "--endpoint", self.endpoint, "--state-dir", self.state_dir]
        self.server_key = ""                          # the server's CURVE public key ("" = none)
        self._supervisor_keys: dict[str, str] = {}    # Client(server_key=..., client_key=...)
        if curve if curve is not None else not is_loopback_host(host):
            keys = os.path.join(self.state_dir, "keys")
            self.server_key, _ = write_key_pair(keys, "server")
            write_key_pair(keys, "supervisor")
            allowed = [Path(keys, "supervisor.pub").read_text(encoding="ascii").strip()]
            allowed += [f"{read_public_key(k)} allowed" for k in allow_keys]
            Path(keys, "allowed_keys").write_text("\n".join(allowed) + "\n", encoding="ascii")
            args += ["--server-key", os.path.join(keys, "server.key"),
                     "--allowed-keys", os.path.join(keys, "allowed_keys")]
            self._supervisor_keys = {"server_key": self.server_key,
                                     "client_key": os.path.join(keys, "supervisor.key")}
        if self.tasks_dir:
            args += ["--tasks", self.tasks_dir]
        if not any(a == "--events" or a.startswith("--events=") for a in extra_args):
            args += ["--events", "none"]
        args += list(extra_args)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        self.hello = self._wait_ready(start_timeout_s)

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with Client(self.endpoint, timeout=1.0, **self._supervisor_keys) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"d2k serve exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    return client.hello("d2k-cluster")
                except ClientTimeout:
                    continue
        self.stop()
        raise RuntimeError(f"d2k serve did not answer hello in {timeout_s} s:\n{self.tail()}")

    def allow_key(self, key: str, name: str = "allowed") -> None:
        """Lets one more client public key in (the server re-reads its allowlist when it changes)."""
        if not self.server_key:
            raise ValueError("this server runs without CURVE: every client on its endpoint gets in")
        path = Path(self.state_dir, "keys", "allowed_keys")
        with open(path, "a", encoding="ascii") as f:
            f.write(f"{read_public_key(key)} {name}\n")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 4000) -> str:
        try:
            self._log.flush()
            return Path(self.log_path).read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: the way a crash looks (tests)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout_s: float = 40.0) -> int | None:
        """SIGTERM (work in flight finishes within the server's shutdown grace), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

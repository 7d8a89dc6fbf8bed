"""The cluster router: one protocol-v1 endpoint in front of many ``d2k serve`` processes.

Clients connect to the router exactly as to a server (DEALER or REQ, protocol/PROTOCOL.md), so
``d2k.Client``, ``AsyncClient``, ``KernelEnv`` and ``KernelVectorEnv`` work unchanged with a
router's endpoint. The router needs no Ray: :mod:`d2k.cluster.ray_cluster` runs it in a Ray actor
and feeds it servers as Ray places them, but a Router can front servers started any other way.

What it does with each request (decoded once; ids rewritten, everything else passed through):
  * ``reset``: placed on the live server with the least load (open sessions and queue depth from
    its ``stats``, per GPU; servers whose ``stats`` say they are not ready only when no server is
    ready); the session then stays on that server (session id -> server). A server that answers
    ``capacity``/``shutting_down`` or dies while the reset is in flight: the reset is sent to the
    next server (an error reply has no effect, and a dead server's sessions are gone).
    The reply gains ``server`` (the server's name).
  * ``step``, ``observe``, ``close`` and any request with a ``session`` field: to the session's
    server. A session whose server died: error ``server_lost`` (not retryable: the episode is
    gone), for requests in flight at the moment of death and for every later one.
  * ``hello`` and ``stats``: answered by the router (``stats`` has one entry per server);
    ``list_tasks`` and other requests without a session: the least-loaded server.
Ids: each request forwarded gets a router id unique per server; a client's resend with the same
id maps to the same router id, so the server's reply cache still runs nothing twice.

CURVE (issue 19 item 1, docs/multi-tenant.md): the router has one key pair (``curve_key``, a
``.key`` file from ``d2k keys server``). Towards servers bound beyond loopback it is a CURVE client
(``add_server(..., server_key=THE_SERVER'S_PUBLIC_KEY)``; the router's public key must be in that
server's ``--allowed-keys``). Towards clients, ``allowed_keys`` (a file of client public keys,
reloaded when it changes) makes its own endpoint a CURVE server: only listed keys get in, clients
use ``D2K_SERVER_KEY=<router's .pub>``, and every session is bound to the key that opened it
(another key gets ``unknown_session``, as from a server). The servers see one client, the router.

Threading: the sockets belong to one thread (``run``); ``add_server``, ``remove_server``,
``server_lost``, ``status`` and ``close`` are safe from any thread.
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgpack
import zmq
import zmq.utils.z85

from ..wire import _is_z85_key, _key_lines, read_key_pair, read_public_key

PROTOCOL_VERSION = 1

# The router's own protocol error code: the server that held the session is gone.
SERVER_LOST = "server_lost"

# How many (client, id) -> (server, router id) pairs are remembered for same-id resends, and
# how many lost sessions are remembered to answer server_lost (oldest forgotten first).
ID_MEMORY = 262_144
LOST_MEMORY = 262_144

ZAP_DOMAIN = b"d2k"
ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq asks who may connect (RFC 27)


@dataclass
class _Pending:
    route: list[bytes]          # the client's envelope frames (routing id, REQ delimiter...)
    client_id: Any              # the client's request id, put back into the reply
    op: str
    session: str | None
    fields: dict[str, Any]      # the request as decoded (to re-place a reset)
    server: str
    rid: int                    # router id on that server
    sent: float
    tried: set[str] = field(default_factory=set)
    key: str = ""               # the client's CURVE public key ("" without CURVE on the front)


@dataclass
class _Server:
    name: str
    endpoint: str
    socket: zmq.Socket
    state: str = "live"         # live | draining (no new sessions) | lost
    hello: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    sessions: int = 0           # open sessions the router placed there
    placed: int = 0             # sessions placed there since it joined
    last_reply: float = 0.0
    last_stats_sent: float = 0.0
    stats_rid: int | None = None
    hello_rid: int | None = None
    lost_reason: str = ""
    server_key: str = ""        # its CURVE public key ("" = plain ZeroMQ, loopback or ipc)


def _error_reply(rid: Any, code: str, message: str, retryable: bool) -> bytes:
    return msgpack.packb({"v": PROTOCOL_VERSION, "id": rid, "ok": False,
                          "error": {"code": code, "message": message[:2048], "retryable": retryable}},
                         use_bin_type=True)


def is_local_endpoint(endpoint: str) -> bool:
    """ipc://, inproc://, or tcp:// on a loopback address (127.x, ::1, localhost)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    if not endpoint.startswith("tcp://"):
        return False
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def read_allowlist(path: str) -> set[str]:
    """The client public keys of an allowlist file (``--allowed-keys``'s format: one key a line,
    optionally followed by a name; ``# `` comments), as the C++ server reads it."""
    keys = set()
    for t in _key_lines(path):
        key = t.split()[0]
        if not _is_z85_key(key):
            raise ValueError(f"{path}: {key[:50]!r} is not a CURVE public key (40 characters of Z85; "
                             "a line of a .pub file `d2k keys` wrote)")
        keys.add(key)
    return keys


def no_keys_message(endpoint: str) -> str:
    return (f"refusing to bind the router to {endpoint} without authentication: beyond loopback and "
            "ipc it needs CURVE keys:\n"
            "  d2k keys server ~/.d2k/router      # the router's key pair: server.key, server.pub\n"
            "  d2k keys client ~/.d2k --name me   # one per client; cat ~/.d2k/me.pub >> ~/.d2k/router_allowed\n"
            "  Router(endpoint, curve_key='~/.d2k/router/server.key', allowed_keys='~/.d2k/router_allowed')\n"
            "  (d2k-cluster up --router-key ... --router-allowed-keys ...)\n"
            "Clients set D2K_SERVER_KEY=<the router's server.pub> and D2K_CLIENT_KEY=me.key. "
            "allow_remote=True (--allow-remote) binds without keys, on a trusted network only")


def server_load(server: _Server) -> float:
    """Placement score (lower is better): open sessions plus queued work, per GPU.

    Open sessions are the larger of what this router placed there (exact and immediate) and what
    the server's last ``stats`` reported (sessions opened by other routers or clients). Queued
    work is the server's compile queue, GPU queues and actions in flight, weighted x4: a session
    waiting behind a queue costs more than an idle open one.
    """
    stats = server.stats
    sessions = stats.get("sessions") if isinstance(stats.get("sessions"), dict) else {}
    active = int(sessions.get("active", 0) or 0)
    compile_stats = stats.get("compile") if isinstance(stats.get("compile"), dict) else {}
    gpus = stats.get("gpus") if isinstance(stats.get("gpus"), list) else []
    queued = int(compile_stats.get("queued", 0) or 0) + int(stats.get("in_flight", 0) or 0)
    queued += sum(int(g.get("queued", 0) or 0) for g in gpus if isinstance(g, dict))
    width = max(1, len(server.hello.get("gpus") or []))
    return (max(server.sessions, active) + 4 * queued) / width


def server_ready(server: _Server) -> bool:
    """False while the server's ``stats`` say it is still preparing its tasks (``ready: false``
    or ``preparation.ready: false``); servers that report neither are ready."""
    stats = server.stats
    if stats.get("ready") is False:
        return False
    prep = stats.get("preparation")
    return not (isinstance(prep, dict) and prep.get("ready") is False)


class Router:
    """``Router("tcp://127.0.0.1:5600")``; ``add_server(name, endpoint)``; ``run_in_thread()``.

    Args:
        endpoint: where clients connect (bound here; ``tcp://HOST:0`` picks a free port, see
            :attr:`endpoint` after construction).
        stats_interval_s: how often each server's ``stats`` is asked for (load and liveness).
        dead_after_s: a server that has answered nothing (not even ``stats``) for this long while
            asked is declared lost; None leaves death to whoever calls :meth:`server_lost`.
        on_lost: called (from the router thread) with (name, reason) when the router itself
            declares a server lost.
        curve_key: the router's key pair (a ``.key`` file of ``d2k keys server``, or a (public,
            secret) pair of Z85 strings): its identity as a CURVE client of the servers added with
            a ``server_key``, and as the CURVE server of its own endpoint when ``allowed_keys`` is set.
        allowed_keys: a file of client public keys (one a line, as ``d2k serve --allowed-keys``),
            reloaded when it changes: the router's endpoint becomes a CURVE server (needs
            ``curve_key``), only listed keys connect, and sessions are bound to their key.
        allow_remote: without ``allowed_keys`` the router has no authentication, so binding
            anything but loopback or ipc is refused unless this is True: whoever reaches the port
            can open and drive sessions. Trusted networks only; use keys instead.
    """

    def __init__(self, endpoint: str = "tcp://127.0.0.1:0", *, stats_interval_s: float = 1.0,
                 dead_after_s: float | None = 15.0,
                 on_lost: Callable[[str, str], None] | None = None,
                 max_message_bytes: int = 8 << 20, allow_remote: bool = False,
                 curve_key: str | tuple[str, str] | None = None,
                 allowed_keys: str | None = None) -> None:
        if allowed_keys is not None and curve_key is None:
            raise ValueError("allowed_keys needs curve_key: the router's own key pair (`d2k keys server DIR`)")
        if not allow_remote and allowed_keys is None and not is_local_endpoint(endpoint):
            raise ValueError(no_keys_message(endpoint))
        if curve_key is not None and not zmq.has("curve"):
            raise RuntimeError("this libzmq has no CURVE (zmq.has('curve') is false)")
        self.public_key, self._secret_key = "", ""
        if curve_key is not None:
            self.public_key, self._secret_key = (read_key_pair(curve_key) if isinstance(curve_key, (str, bytes))
                                                 else (str(curve_key[0]), str(curve_key[1])))
            if zmq.curve_public(self._secret_key.encode()).decode() != self.public_key:
                raise ValueError("curve_key: the public key does not belong to the secret key")
        self._allowed_path = str(allowed_keys) if allowed_keys is not None else None
        self._allowed: set[str] = set()
        self._allowed_stamp: tuple[int, int, int] | None = None
        self._allowed_checked = 0.0
        self.counters: collections.Counter[str] = collections.Counter()
        self.last_internal_error = ""
        self._context = zmq.Context()
        self._zap: zmq.Socket | None = None
        self._front = self._context.socket(zmq.ROUTER)
        self._front.setsockopt(zmq.LINGER, 0)
        self._front.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._front.setsockopt(zmq.MAXMSGSIZE, 16 * max_message_bytes)
        if self._allowed_path is not None:
            self._reload_allowlist(force=True)
            # The ZAP handler must be bound before the CURVE socket takes a connection.
            self._zap = self._context.socket(zmq.REP)
            self._zap.setsockopt(zmq.LINGER, 0)
            self._zap.bind(ZAP_ENDPOINT)
            self._front.setsockopt(zmq.CURVE_SERVER, 1)
            self._front.setsockopt(zmq.CURVE_SECRETKEY, self._secret_key.encode())
            self._front.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        try:
            self._front.bind(endpoint)
        except zmq.ZMQError:
            self._front.close(linger=0)
            if self._zap is not None:
                self._zap.close(linger=0)
            self._context.term()
            raise
        self.endpoint = self._front.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.instance = secrets.token_hex(8)
        self.stats_interval_s = stats_interval_s
        self.dead_after_s = dead_after_s
        self._on_lost = on_lost
        self._servers: dict[str, _Server] = {}
        self._sessions: dict[str, str] = {}          # session id -> server name
        self._owners: dict[str, str] = {}            # session id -> the CURVE key that opened it
        self._lost: collections.OrderedDict[str, tuple[str, str]] = collections.OrderedDict()  # -> (reason, key)
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._ids: collections.OrderedDict[tuple[bytes, Any], tuple[str, int]] = collections.OrderedDict()
        self._rid = itertools.count(secrets.randbelow(1 << 40) + 1)
        self._rr = itertools.count()                 # round robin among equal loads
        self._control: queue.Queue[tuple[Callable[..., Any], tuple, "queue.Queue[Any] | None"]] = queue.Queue()
        self._snapshot: dict[str, Any] = {}
        self._snapshot_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._poller = zmq.Poller()
        self._poller.register(self._front, zmq.POLLIN)
        if self._zap is not None:
            self._poller.register(self._zap, zmq.POLLIN)
        self._registered: set[zmq.Socket] = set()
        self._started = time.monotonic()

    # -- control (any thread) ---------------------------------------------------------------
    def _call(self, fn: Callable[..., Any], *args: Any, wait: bool = True) -> Any:
        if self._thread is None or not self._thread.is_alive():
            return fn(*args)  # not running yet (or stopped): the caller's thread owns the sockets
        box: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._control.put((fn, args, box if wait else None))
        if not wait:
            return None
        result = box.get()
        if isinstance(result, BaseException):
            raise result
        return result

    def add_server(self, name: str, endpoint: str, hello: dict[str, Any] | None = None,
                   server_key: str | None = None) -> None:
        """Registers a server (a name already known is replaced: its old sessions are lost).

        server_key: the server's CURVE public key (its ``.pub`` file or the 40 Z85 characters)
        when it runs with ``--server-key``: the router connects with CURVE and its own key pair
        (``curve_key``), which must be in the server's ``--allowed-keys``."""
        key = read_public_key(server_key) if server_key else ""
        if key and not self._secret_key:
            raise ValueError(f"server {name} needs CURVE ({endpoint}): give the Router a curve_key "
                             "(its own key pair, listed in that server's --allowed-keys)")
        self._call(self._add_server, name, endpoint, hello, key)

    def remove_server(self, name: str, *, drain: bool = True) -> None:
        """Takes a server out of placement. drain=True: its sessions carry on and it leaves once
        they are closed (see status()'s ``sessions``); drain=False: its sessions are lost now."""
        self._call(self._remove_server, name, drain)

    def server_lost(self, name: str, reason: str = "the server died") -> None:
        """The server is gone: its sessions and requests in flight end with ``server_lost``."""
        self._call(self._server_lost, name, reason)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._snapshot) if self._snapshot else self._make_snapshot()

    def session_server(self, session: str) -> str | None:
        return self._call(lambda: self._sessions.get(session))

    def run_in_thread(self) -> "Router":
        self._thread = threading.Thread(target=self.run, name="d2k-router", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for server in self._servers.values():
            if not server.socket.closed:
                server.socket.close(linger=0)
        self._front.close(linger=0)
        if self._zap is not None:
            self._zap.close(linger=0)
        self._context.term()

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop (router thread) -----------------------------------------------------------
    def run(self) -> None:
        poller = self._poller
        while not self._stop.is_set():
            for server in self._servers.values():
                if server.state != "lost" and server.socket not in self._registered:
                    poller.register(server.socket, zmq.POLLIN)
                    self._registered.add(server.socket)
            events = dict(poller.poll(20))
            if self._zap is not None and self._zap in events:
                self._guard(self._on_zap)
            if self._front in events:
                for _ in range(1000):  # bounded batch, so backends are served too
                    try:
                        if self._zap is None:
                            msg, key = self._front.recv_multipart(zmq.NOBLOCK), ""
                        else:  # the key ZAP let in rides on every message of the connection
                            frames = self._front.recv_multipart(zmq.NOBLOCK, copy=False)
                            key = frames[-1].get("User-Id") or ""
                            msg = [f.bytes for f in frames]
                    except zmq.Again:
                        break
                    if self._zap is not None and not key:
                        continue  # cannot happen through the ZAP handler: answer nothing rather than guess
                    self._guard(self._on_request, msg, key)
            for server in list(self._servers.values()):
                if server.socket in events and server.state != "lost":
                    for _ in range(1000):
                        try:
                            msg = server.socket.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._guard(self._on_reply, server, msg[-1])
            self._guard(self._housekeeping)
            while True:
                try:
                    fn, args, box = self._control.get_nowait()
                except queue.Empty:
                    break
                try:
                    result = fn(*args)
                except BaseException as exc:  # handed back to the caller
                    result = exc
                if box is not None:
                    box.put(result)
            now = time.monotonic()
            if now - self._snapshot_at >= 0.2:
                self._snapshot_at = now
                with self._lock:
                    self._snapshot = self._make_snapshot()

    def _guard(self, fn: Callable[..., Any], *args: Any) -> None:
        """Runs one handler; a bug or a message nobody foresaw costs that message, never the loop."""
        try:
            fn(*args)
        except Exception as exc:  # counted and kept for status(); the router carries on
            self.counters["internal_errors"] += 1
            self.last_internal_error = f"{fn.__name__}: {exc!r}"[:1000]

    # -- CURVE on the front (router thread) ----------------------------------------------------
    def _reload_allowlist(self, force: bool = False) -> None:
        assert self._allowed_path is not None
        try:
            st = os.stat(self._allowed_path)
            stamp: tuple[int, int, int] | None = (st.st_size, st.st_mtime_ns, st.st_ino)
        except OSError:
            stamp = None
        if not force and stamp == self._allowed_stamp:
            return
        try:
            fresh = read_allowlist(self._allowed_path)
        except (OSError, ValueError) as exc:
            if force:
                raise ValueError(f"allowed_keys: {exc}") from exc
            self._allowed_stamp = stamp  # report a bad file once; the keys read before stay
            self.counters["allowlist_errors"] += 1
            self.last_internal_error = f"allowed keys not reloaded, the previous list stays: {exc}"[:1000]
            return
        self._allowed, self._allowed_stamp = fresh, stamp
        self.counters["allowlist_loads"] += 1

    def _on_zap(self) -> None:
        """ZAP requests (RFC 27): version, request id, domain, address, routing id, mechanism,
        credentials (the client's 32-byte public key). Listed keys get in, their key as User-Id."""
        assert self._zap is not None
        for _ in range(1000):
            try:
                frames = self._zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            request_id = frames[1] if len(frames) > 1 else b""
            status, text, user = b"400", b"no such key", b""
            if len(frames) >= 7 and frames[2] == ZAP_DOMAIN and frames[5] == b"CURVE":
                key = zmq.utils.z85.encode(frames[6]).decode()
                if key in self._allowed:
                    status, text, user = b"200", b"OK", key.encode()
                else:
                    self.counters["refused_keys"] += 1
            else:
                text = b"CURVE only"
            self._zap.send_multipart([b"1.0", request_id, status, text, user, b""])

    # -- servers -------------------------------------------------------------------------------
    def _add_server(self, name: str, endpoint: str, hello: dict[str, Any] | None, server_key: str = "") -> None:
        if name in self._servers and self._servers[name].state != "lost":
            self._server_lost(name, "replaced by a new server of the same name")
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if server_key:  # a CURVE client of that server, with the router's own key pair
            sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode())
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key.encode())
            sock.setsockopt(zmq.CURVE_SECRETKEY, self._secret_key.encode())
        sock.connect(endpoint)
        now = time.monotonic()
        server = _Server(name=name, endpoint=endpoint, socket=sock, hello=dict(hello or {}),
                         last_reply=now, server_key=server_key)
        self._servers[name] = server
        self.counters["servers_joined"] += 1
        self._ask_stats(server, now)  # and hello, when not given

    def _remove_server(self, name: str, drain: bool) -> None:
        server = self._servers.get(name)
        if server is None or server.state == "lost":
            return
        if drain and server.sessions > 0:
            server.state = "draining"
        else:
            self._server_lost(name, "removed from the cluster")
            self._servers.pop(name, None)

    def _server_lost(self, name: str, reason: str) -> None:
        server = self._servers.get(name)
        if server is None or server.state == "lost":
            return
        server.state = "lost"
        server.lost_reason = reason
        if server.socket in self._registered:
            self._poller.unregister(server.socket)
            self._registered.discard(server.socket)
        server.socket.close(linger=0)
        self.counters["servers_lost"] += 1
        message = f"server {name} ({server.endpoint}) is gone: {reason}; its sessions ended"
        for sid in [s for s, owner in self._sessions.items() if owner == name]:
            del self._sessions[sid]
            self._remember_lost(sid, message, self._owners.pop(sid, ""))
        server.sessions = 0
        for key in [k for k in self._pending if k[0] == name]:
            p = self._pending.pop(key)
            if p.op == "reset" or p.session is None:
                self._forward_new(p, exclude=p.tried | {name})  # nothing of it survives: place again
            else:
                self._answer(p.route, _error_reply(
                    p.client_id, SERVER_LOST, f"{message} (session {p.session})", False))
                self.counters["server_lost_replies"] += 1

    def _remember_lost(self, session: str, message: str, key: str) -> None:
        self._lost[session] = (message, key)
        while len(self._lost) > LOST_MEMORY:
            self._lost.popitem(last=False)

    def _backend_send(self, server: _Server, body: dict[str, Any]) -> bool:
        """Never blocks the router: a server whose connection is down (refused at the CURVE
        handshake, say: ZeroMQ then keeps no queue for it) takes nothing; False then."""
        try:
            server.socket.send(msgpack.packb(body, use_bin_type=True), zmq.NOBLOCK)
            return True
        except zmq.Again:
            self.counters["unsent"] += 1
            return False

    def _send_internal(self, server: _Server, op: str, fields: dict[str, Any]) -> int | None:
        rid = next(self._rid)
        body = {"v": PROTOCOL_VERSION, "id": rid, "op": op}
        body.update(fields)
        if not self._backend_send(server, body):
            return None  # asked again at the next poll; its silence counts towards dead_after_s
        self._pending[(server.name, rid)] = _Pending(route=[], client_id=None, op="@" + op,
                                                     session=None, fields={}, server=server.name,
                                                     rid=rid, sent=time.monotonic())
        return rid

    def _ask_stats(self, server: _Server, now: float) -> None:
        server.last_stats_sent = now
        if server.stats_rid is not None:
            self._pending.pop((server.name, server.stats_rid), None)
        server.stats_rid = self._send_internal(server, "stats", {})
        if not server.hello and (server.hello_rid is None or (server.name, server.hello_rid) not in self._pending):
            server.hello_rid = self._send_internal(server, "hello", {"client": "d2k-router"})

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if self._allowed_path is not None and now - self._allowed_checked >= 1.0:
            self._allowed_checked = now
            self._reload_allowlist()
        for server in list(self._servers.values()):
            if server.state == "lost":
                continue
            if now - server.last_stats_sent >= self.stats_interval_s:
                self._ask_stats(server, now)
            silent = now - server.last_reply
            if self.dead_after_s is not None and silent > self.dead_after_s:
                reason = f"no reply for {silent:.1f} s"
                self._server_lost(server.name, reason)
                if self._on_lost is not None:
                    self._on_lost(server.name, reason)
            elif server.state == "draining" and server.sessions == 0:
                self._server_lost(server.name, "drained and left the cluster")
                self._servers.pop(server.name, None)

    def _pick(self, exclude: set[str]) -> _Server | None:
        live = [s for s in self._servers.values() if s.state == "live" and s.name not in exclude]
        if not live:
            return None
        ready = [s for s in live if server_ready(s)] or live
        turn = next(self._rr)
        ordered = sorted(ready, key=lambda s: s.name)
        ordered = ordered[turn % len(ordered):] + ordered[:turn % len(ordered)]
        return min(ordered, key=server_load)

    # -- requests ----------------------------------------------------------------------------
    def _answer(self, route: list[bytes], payload: bytes) -> None:
        try:
            self._front.send_multipart([*route, payload])
        except zmq.ZMQError:
            self.counters["unroutable_replies"] += 1

    def _local_reply(self, rid: Any, body: dict[str, Any]) -> bytes:
        reply = {"v": PROTOCOL_VERSION, "id": rid, "ok": True}
        reply.update(body)
        return msgpack.packb(reply, use_bin_type=True)

    def _on_request(self, msg: list[bytes], key: str = "") -> None:
        self.counters["requests"] += 1
        route, payload = msg[:-1], msg[-1]
        try:
            req = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types
            self._answer(route, _error_reply(None, "bad_request", f"undecodable request: {exc}", False))
            return
        if not isinstance(req, dict):
            self._answer(route, _error_reply(None, "bad_request", "the request is not a map", False))
            return
        rid = req.get("id")
        if not isinstance(rid, int) or isinstance(rid, bool) or rid < 1:
            self._answer(route, _error_reply(None, "bad_request", "id must be an unsigned integer >= 1", False))
            return
        if req.get("v") != PROTOCOL_VERSION:
            self._answer(route, _error_reply(rid, "version_mismatch", "this router speaks protocol version 1", False))
            return
        op = req.get("op")
        if not isinstance(op, str):
            self._answer(route, _error_reply(rid, "bad_request", "op must be a string", False))
            return
        if op == "hello":
            self._answer(route, self._local_reply(rid, self._hello()))
            return
        if op == "stats":
            self._answer(route, self._local_reply(rid, self._stats()))
            return
        session = req.get("session")
        pending = _Pending(route=route, client_id=rid, op=op,
                           session=session if isinstance(session, str) else None,
                           fields=req, server="", rid=0, sent=time.monotonic(), key=key)
        known = self._ids.get(self._id_key(pending))
        if known is not None:  # a resend of the same request: same server, same router id
            server = self._servers.get(known[0])
            if server is not None and server.state != "lost":
                pending.server, pending.rid = known
                waiting = self._pending.setdefault(known, pending)
                waiting.route = route  # the reply goes to the connection that asked last (a new socket)
                req["id"] = known[1]
                self._backend_send(server, req)  # unsent: the client resends again
                self.counters["resends"] += 1
                return
        if pending.session is not None:
            owner = self._sessions.get(pending.session)
            if owner is not None and self._owners.get(pending.session, "") != key:
                owner = None  # opened with another key: for this client it does not exist
            if owner is None:
                lost = self._lost.get(pending.session)
                if lost is not None and lost[1] == key:
                    self._answer(route, _error_reply(rid, SERVER_LOST, f"{lost[0]} (session {pending.session})", False))
                    self.counters["server_lost_replies"] += 1
                else:
                    self._answer(route, _error_reply(rid, "unknown_session",
                                                     "no such session on this cluster (closed, reaped, "
                                                     "or opened through another router)", False))
                return
            self._send_to(self._servers[owner], pending)
            return
        self._forward_new(pending, exclude=set())

    def _forward_new(self, p: _Pending, exclude: set[str]) -> None:
        """A request without a session (reset, list_tasks...): to the least-loaded live server."""
        server = self._pick(exclude)
        if server is None:
            self._answer(p.route, _error_reply(
                p.client_id, "capacity", "no d2k server in the cluster can take it now "
                "(none joined yet, all lost, draining or full)", True))
            return
        p.tried = set(exclude) | {server.name}
        self._send_to(server, p)

    @staticmethod
    def _id_key(p: _Pending) -> tuple[bytes, Any]:
        """Whose request id it is: with CURVE the client is its key (a resend from a new socket
        with the same key is the same request, as on a server), else its connection."""
        return (b"curve:" + p.key.encode() if p.key else (p.route[0] if p.route else b""), p.client_id)

    def _send_to(self, server: _Server, p: _Pending) -> None:
        rid = next(self._rid)
        p.server, p.rid, p.sent = server.name, rid, time.monotonic()
        body = dict(p.fields)
        body["id"] = rid
        self._pending[(server.name, rid)] = p
        self._ids[self._id_key(p)] = (server.name, rid)
        while len(self._ids) > ID_MEMORY:
            self._ids.popitem(last=False)
        if p.op == "reset":
            server.sessions += 1  # counted at once, so a burst of resets spreads out
        if self._backend_send(server, body):
            return
        self._pending.pop((server.name, rid), None)
        self._ids.pop(self._id_key(p), None)
        if p.op == "reset" or p.session is None:  # nothing ran: the next server
            if p.op == "reset":
                server.sessions = max(0, server.sessions - 1)
            self._forward_new(p, exclude=p.tried | {server.name})
        else:
            self._answer(p.route, _error_reply(
                p.client_id, "capacity", f"server {server.name} of session {p.session} cannot be reached "
                "now (its connection is down); retry, or it is declared lost", True))

    # -- replies -----------------------------------------------------------------------------
    def _on_reply(self, server: _Server, payload: bytes) -> None:
        server.last_reply = time.monotonic()
        try:
            reply = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        except Exception:
            self.counters["bad_replies"] += 1
            return
        if not isinstance(reply, dict):
            return
        rid = reply.get("id")
        p = self._pending.pop((server.name, rid), None) if isinstance(rid, int) else None
        if p is None:
            self.counters["stale_replies"] += 1  # a second answer to a resend, or a forgotten stats
            return
        if p.op.startswith("@"):
            if reply.get("ok") is True and p.op == "@stats":
                server.stats = reply
                server.stats_rid = None
                # Sessions the server reaped (idle timeout) are still in the router's count until a
                # client touches them: never count more than the server holds plus resets in flight.
                sessions = reply.get("sessions") if isinstance(reply.get("sessions"), dict) else {}
                held = int(sessions.get("active", 0) or 0) + int(sessions.get("ended", 0) or 0)
                resets = sum(1 for q in self._pending.values() if q.server == server.name and q.op == "reset")
                server.sessions = min(server.sessions, held + resets)
            elif reply.get("ok") is True and p.op == "@hello":
                server.hello = reply
            return
        ok = reply.get("ok") is True
        code = (reply.get("error") or {}).get("code") if not ok and isinstance(reply.get("error"), dict) else None
        if p.op == "reset":
            server.sessions = max(0, server.sessions - 1)
            if ok and isinstance(reply.get("session"), str):
                self._sessions[reply["session"]] = server.name
                if p.key:
                    self._owners[reply["session"]] = p.key
                server.sessions += 1
                server.placed += 1
                reply["server"] = server.name
            elif code in ("capacity", "shutting_down") and len(p.tried) < len(self._servers):
                self._forward_new(p, exclude=p.tried)  # nothing ran there: the next server
                return
        elif p.session is not None and (p.op == "close" and ok or code == "unknown_session"):
            if self._sessions.pop(p.session, None) is not None:
                server.sessions = max(0, server.sessions - 1)
            self._owners.pop(p.session, None)
        reply["id"] = p.client_id
        self._answer(p.route, msgpack.packb(reply, use_bin_type=True))
        self.counters["replies"] += 1

    # -- router-answered ops -----------------------------------------------------------------
    def _hello(self) -> dict[str, Any]:
        members = [s for s in self._servers.values() if s.state != "lost"]
        live = [s for s in members if s.hello]
        gpus: list[dict[str, Any]] = []
        limits: dict[str, int] = {}
        for s in live:
            for g in s.hello.get("gpus") or []:
                gpus.append(dict(g, server=s.name))
            for k, v in (s.hello.get("limits") or {}).items():
                if isinstance(v, int):
                    limits[k] = min(limits.get(k, v), v)
        first = live[0].hello if live else {}
        config = dict(first.get("config") or {})
        config["cluster"] = {"servers": len(members), "router": True}
        return {"server": "d2k-gym", "version": first.get("version", ""), "protocol": [PROTOCOL_VERSION],
                "gpus": gpus, "toolchain": first.get("toolchain", {}), "limits": limits,
                "instance": self.instance, "config": config}

    def _stats(self) -> dict[str, Any]:
        snap = self._make_snapshot()
        total = {"active": 0, "ended": 0, "total_opened": 0}
        requests = errors = in_flight = 0
        for s in self._servers.values():
            if s.state == "lost":
                continue
            sessions = s.stats.get("sessions") or {}
            for k in total:
                total[k] += int(sessions.get(k, 0) or 0)
            requests += int(s.stats.get("requests", 0) or 0)
            errors += int(s.stats.get("errors", 0) or 0)
            in_flight += int(s.stats.get("in_flight", 0) or 0)
        return {"uptime_s": float(time.monotonic() - self._started), "sessions": total,
                "requests": requests, "errors": errors, "in_flight": in_flight,
                "servers": snap["servers"], "router": snap["router"]}

    def _make_snapshot(self) -> dict[str, Any]:
        servers = []
        for s in sorted(self._servers.values(), key=lambda s: s.name):
            servers.append({"name": s.name, "endpoint": s.endpoint, "state": s.state, "curve": bool(s.server_key),
                            "ready": server_ready(s), "sessions": s.sessions, "placed": s.placed,
                            "load": round(server_load(s), 3), "gpus": len(s.hello.get("gpus") or []),
                            "lost_reason": s.lost_reason, "stats": s.stats})
        return {"endpoint": self.endpoint, "instance": self.instance, "servers": servers,
                "curve": {"public_key": self.public_key, "clients": self._allowed_path is not None,
                          "allowed_keys": len(self._allowed)},
                "router": {"sessions": len(self._sessions), "lost_sessions": len(self._lost),
                           "last_internal_error": self.last_internal_error,
                           "pending": sum(1 for p in self._pending.values() if not p.op.startswith("@")),
                           **{k: int(v) for k, v in self.counters.items()}}}

"""d2k servers on a Ray cluster: one ``d2k serve`` per GPU host, one router in front.

    import ray, d2k.cluster.ray_cluster as rc
    ray.init(address="auto", namespace="d2k")
    endpoint = rc.up()                        # the router's tcp:// endpoint (also "ray:auto")
    env = d2k.KernelEnv("softmax", 2, endpoint=endpoint)
    rc.status(); rc.down()

Actors (namespace ``d2k``):
  * ``d2k-cluster-<name>`` (:class:`ClusterActor`, detached when started by ``up``): runs the
    :class:`~d2k.cluster.router.Router` and a supervisor thread. Every ``poll_s`` the supervisor
    lists Ray's nodes; each live node with the host resource (``GPU`` by default: a GPU host)
    and no server gets a :class:`ServerActor`, pinned there (``NodeAffinitySchedulingStrategy``,
    not soft) and holding all the node's GPUs (``num_gpus`` = the node's GPU count), so Ray
    places exactly one ``d2k serve`` per GPU host and nothing else gets those GPUs. A node that
    joins gets a server on the next poll; a node that dies (Ray marks it dead), a server actor
    that dies, or a server silent for ``dead_after_s`` (the router's own check) is lost: its
    sessions end with ``server_lost`` and new sessions go elsewhere. :func:`drain` makes a host's
    server leave gracefully (no new sessions, gone once its sessions are closed).
  * ``ServerActor``: starts ``d2k serve`` on its node (:class:`~d2k.cluster.serve.ServerProcess`,
    bound to the node's address, the process dying with the actor).

CURVE (issue 19 item 1): the router has a key pair (``router_key``, a ``.key`` file on its node,
else one made in memory at start). A server bound beyond loopback (the default: each node's
address) gets its own key pair, made by its actor in its state folder, and an allowlist with the
router's public key (plus ``server_allow_keys``); the router connects to it with CURVE. With
``router_allowed_keys`` (a file of client public keys, re-read when it changes) the router's own
endpoint takes CURVE clients only and may bind beyond loopback (clients: ``D2K_SERVER_KEY`` = the
router's public key, ``status()["router"]["curve"]["public_key"]``).

Compile-only clusters (tests, CPU hosts): ``host_resource="d2k_host"`` (any custom resource
the nodes were started with, e.g. ``ray start --resources '{"d2k_host": 1}'``) and
``server_args=["--no-gpu"]``.
"""
from __future__ import annotations

import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .address import NAMESPACE, router_actor_name
from .router import Router
from .serve import ServerProcess


@dataclass
class ClusterConfig:
    """What ``up`` starts. Every field has a ``python -m d2k.cluster up`` flag."""

    name: str = "d2k"                    # the cluster's name (actor d2k-cluster-<name>)
    router_host: str = "127.0.0.1"       # the router's bind address; "" = its node's address
    router_port: int = 0                 # 0 = a free port
    allow_remote: bool = False           # bind the router off loopback WITHOUT keys (trusted networks only)
    router_key: str | None = None        # the router's key pair (.key file); None: made in memory
    router_allowed_keys: str | None = None  # client public keys the router's endpoint lets in (CURVE)
    server_allow_keys: list[str] = field(default_factory=list)  # more keys the servers let in
    host_resource: str = "GPU"           # nodes with this resource get a server
    server_host: str = ""                # the servers' bind address; "" = each node's address
    server_args: list[str] = field(default_factory=list)  # more `d2k serve` options
    binary: str | None = None            # d2k on the nodes (default: as the embedded server)
    tasks_dir: str | None = None         # tasks on the nodes (default: the package's)
    state_dir: str | None = None         # per-server state folder root (default: a temp folder)
    poll_s: float = 2.0                  # supervisor period (nodes, actor health)
    stats_interval_s: float = 1.0        # router's stats poll per server
    dead_after_s: float = 15.0           # a server silent this long is lost
    server_start_timeout_s: float = 180.0


def node_address() -> str:
    try:
        return ray.util.get_node_ip_address()
    except Exception:  # not on a Ray node: this host's name
        return socket.gethostbyname(socket.gethostname())


@ray.remote(num_cpus=0, max_restarts=0)
class ServerActor:
    """One ``d2k serve`` on the node this actor was placed on."""

    def __init__(self, config: dict[str, Any], node_id: str, router_key: str = "") -> None:
        cfg = ClusterConfig(**config)
        state_dir = None
        if cfg.state_dir:
            state_dir = f"{cfg.state_dir}/{node_id[:12]}"
        self.server = ServerProcess(cfg.server_host or node_address(), 0, binary=cfg.binary,
                                    tasks_dir=cfg.tasks_dir, state_dir=state_dir,
                                    extra_args=cfg.server_args,
                                    start_timeout_s=cfg.server_start_timeout_s,
                                    allow_keys=[k for k in [router_key, *cfg.server_allow_keys] if k])

    def info(self) -> dict[str, Any]:
        return {"endpoint": self.server.endpoint, "hello": self.server.hello,
                "server_key": self.server.server_key,
                "pid": self.server.proc.pid, "log": self.server.log_path}

    def ping(self) -> bool:
        if not self.server.alive():
            raise RuntimeError(f"d2k serve exited with {self.server.proc.returncode}:\n{self.server.tail()}")
        return True

    def stop(self) -> int | None:
        return self.server.stop()


@dataclass
class _Member:
    node_id: str
    name: str
    actor: Any
    info_ref: Any = None        # ObjectRef of info() until the server is up
    ping_ref: Any = None
    state: str = "starting"     # starting | live | draining | lost
    endpoint: str = ""
    error: str = ""
    started: float = 0.0


@ray.remote(num_cpus=0, max_concurrency=8)
class ClusterActor:
    """The router plus the supervisor that keeps one server per host (see the module doc)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ClusterConfig(**config)
        host = self.config.router_host or node_address()
        import zmq
        key: Any = self.config.router_key
        if key is None and zmq.has("curve"):  # servers beyond loopback need it; loopback ones ignore it
            key = tuple(k.decode() for k in zmq.curve_keypair())
        self.router = Router(f"tcp://{host}:{self.config.router_port}",
                             stats_interval_s=self.config.stats_interval_s,
                             dead_after_s=self.config.dead_after_s, on_lost=self._router_lost,
                             allow_remote=self.config.allow_remote, curve_key=key,
                             allowed_keys=self.config.router_allowed_keys)
        self.router.run_in_thread()
        self.members: dict[str, _Member] = {}   # by node id
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.lost_log: list[dict[str, Any]] = []
        self.drained: set[str] = set()          # nodes left on purpose: no new server there
        self.thread = threading.Thread(target=self._supervise, name="d2k-supervisor", daemon=True)
        self.thread.start()

    # -- remote methods ---------------------------------------------------------------------
    def endpoint(self) -> str:
        return self.router.endpoint

    def status(self) -> dict[str, Any]:
        with self.lock:
            members = [{"node_id": m.node_id, "name": m.name, "state": m.state,
                        "endpoint": m.endpoint, "error": m.error} for m in self.members.values()]
        return {"name": self.config.name, "endpoint": self.router.endpoint,
                "config": asdict(self.config), "members": members, "lost": list(self.lost_log),
                "router": self.router.status()}

    def wait_servers(self, count: int, timeout_s: float = 300.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                live = sum(1 for m in self.members.values() if m.state == "live")
            if live >= count:
                return live
            time.sleep(0.2)
        raise TimeoutError(f"{live} of {count} d2k servers up after {timeout_s} s: {self.status()}")

    def drain(self, node_id: str) -> None:
        """The node's server leaves: no new sessions; stopped once its sessions are closed."""
        with self.lock:
            member = self.members.get(node_id)
            self.drained.add(node_id)
            if member is None:
                return
            member.state = "draining"
        self.router.remove_server(member.name, drain=True)

    def shutdown(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        with self.lock:
            members = list(self.members.values())
        for m in members:
            self.router.remove_server(m.name, drain=False)
        stops = [m.actor.stop.remote() for m in members if m.state != "lost"]
        try:
            ray.get(stops, timeout=60)
        except Exception:
            pass
        for m in members:
            ray.kill(m.actor)
        self.router.close()

    # -- supervisor (its own thread) --------------------------------------------------------
    def _router_lost(self, name: str, reason: str) -> None:
        with self.lock:
            for m in self.members.values():
                if m.name == name and m.state != "lost":
                    self._mark_lost(m, f"router: {reason}", tell_router=False)

    def _mark_lost(self, m: _Member, reason: str, tell_router: bool = True) -> None:
        m.state, m.error = "lost", reason
        self.lost_log.append({"node_id": m.node_id, "name": m.name, "reason": reason, "at": time.time()})
        if tell_router:
            self.router.server_lost(m.name, reason)
        try:
            ray.kill(m.actor, no_restart=True)
        except Exception:
            pass

    def _supervise(self) -> None:
        while not self.stopping.is_set():
            try:
                self._poll_once()
            except Exception as exc:  # never let the supervisor die; retry next period
                self.lost_log.append({"supervisor_error": repr(exc), "at": time.time()})
            self.stopping.wait(self.config.poll_s)

    def _poll_once(self) -> None:
        nodes = {n["NodeID"]: n for n in ray.nodes()}
        resource = self.config.host_resource
        with self.lock:
            # Dead nodes and dead actors: lost. Ray's word is enough; the router's silence check
            # catches a hung server Ray still thinks alive.
            for m in list(self.members.values()):
                if m.state == "lost":
                    if not nodes.get(m.node_id, {}).get("Alive", False):
                        del self.members[m.node_id]  # the node left; a new one gets a new id
                    elif m.node_id not in self.drained:
                        del self.members[m.node_id]  # a lost server on a live node: start anew
                    continue
                if not nodes.get(m.node_id, {}).get("Alive", False):
                    self._mark_lost(m, "its Ray node died")
                    continue
                if m.state == "starting":
                    ready, _ = ray.wait([m.info_ref], timeout=0)
                    if ready:
                        try:
                            info = ray.get(m.info_ref)
                        except Exception as exc:
                            self._mark_lost(m, f"d2k serve did not start: {exc}"[:2000], tell_router=False)
                            continue
                        m.endpoint, m.state = info["endpoint"], "live"
                        self.router.add_server(m.name, m.endpoint, info["hello"],
                                               server_key=info.get("server_key") or None)
                    continue
                if m.ping_ref is not None:
                    ready, _ = ray.wait([m.ping_ref], timeout=0)
                    if ready:
                        try:
                            ray.get(m.ping_ref)
                            m.ping_ref = None
                        except Exception as exc:
                            self._mark_lost(m, f"server actor failed: {exc}"[:2000])
                            continue
                if m.ping_ref is None:
                    m.ping_ref = m.actor.ping.remote()
                if m.state == "draining" and not self._router_has(m.name):
                    m.state = "lost"
                    m.error = "drained"
                    m.actor.stop.remote()
            # Nodes with the host resource and no server: start one there.
            for node_id, node in nodes.items():
                if not node.get("Alive") or node_id in self.members or node_id in self.drained:
                    continue
                amount = float((node.get("Resources") or {}).get(resource, 0))
                if amount <= 0:
                    continue
                options: dict[str, Any] = {
                    "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
                if resource == "GPU":
                    options["num_gpus"] = amount  # all the host's GPUs: one server per GPU host
                else:
                    options["resources"] = {resource: amount}
                actor = ServerActor.options(**options).remote(asdict(self.config), node_id,
                                                              self.router.public_key)
                name = f"{node.get('NodeManagerAddress', 'node')}-{node_id[:8]}"
                self.members[node_id] = _Member(node_id=node_id, name=name, actor=actor,
                                                info_ref=actor.info.remote(), started=time.monotonic())

    def _router_has(self, name: str) -> bool:
        return any(s["name"] == name for s in self.router.status()["servers"])


# -- driver-side helpers (need ray.init first, or they call it) ------------------------------
_OWNED: dict[str, Any] = {}


def _ensure_ray(address: str | None) -> None:
    if not ray.is_initialized():
        ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False,
                 logging_level="WARNING")


def up(config: ClusterConfig | None = None, *, address: str | None = None, wait_servers: int = 0,
       detached: bool = True, timeout_s: float = 300.0) -> str:
    """Starts the cluster actor (or finds the running one of that name); returns the router's
    endpoint. wait_servers: block until that many servers are live."""
    config = config or ClusterConfig()
    _ensure_ray(address)
    # The router runs where `up` runs (the head node, typically): not on a GPU host that may leave.
    here = ray.get_runtime_context().get_node_id()
    options: dict[str, Any] = {"name": router_actor_name(config.name), "namespace": NAMESPACE,
                               "get_if_exists": True,
                               "scheduling_strategy": NodeAffinitySchedulingStrategy(here, soft=True)}
    if detached:
        options["lifetime"] = "detached"
    actor = ClusterActor.options(**options).remote(asdict(config))
    if not detached:
        _OWNED[config.name] = actor  # a non-detached actor lives as long as a handle to it does
    endpoint = ray.get(actor.endpoint.remote(), timeout=timeout_s)
    if wait_servers:
        ray.get(actor.wait_servers.remote(wait_servers, timeout_s), timeout=timeout_s + 10)
    return str(endpoint)


def get(name: str = "d2k", *, address: str | None = None):
    _ensure_ray(address)
    return ray.get_actor(router_actor_name(name), namespace=NAMESPACE)


def status(name: str = "d2k", *, address: str | None = None) -> dict[str, Any]:
    return ray.get(get(name, address=address).status.remote(), timeout=60)


def down(name: str = "d2k", *, address: str | None = None) -> None:
    actor = get(name, address=address)
    try:
        ray.get(actor.shutdown.remote(), timeout=120)
    finally:
        ray.kill(actor)
        _OWNED.pop(name, None)

"""Cluster addresses: where a client finds the router of a ``d2k.cluster`` running on Ray.

An endpoint starting with ``ray:`` names a Ray cluster instead of a socket:

  ``ray:auto``            the Ray cluster this machine belongs to (``ray.init(address="auto")``)
  ``ray:HOST:PORT``       the Ray cluster whose GCS is at HOST:PORT (``ray start --head``'s address)
  ``ray://HOST:PORT``     the same through Ray Client (port 10001 by default)
  ``...#NAME``            the d2k cluster called NAME on it (default ``d2k``, see ``d2k cluster up``)

:func:`resolve_endpoint` asks that cluster's router actor for its ZeroMQ endpoint; every other
endpoint (``tcp://``, ``ipc://``) is returned unchanged. A router's endpoint itself is a plain
``tcp://`` endpoint and can be given directly (no Ray needed on the client then).
"""
from __future__ import annotations

DEFAULT_NAME = "d2k"
NAMESPACE = "d2k"


def is_cluster_address(endpoint: str | None) -> bool:
    return bool(endpoint) and str(endpoint).startswith("ray:")


def split_address(address: str) -> tuple[str, str]:
    """``"ray:auto#prod"`` -> (``"auto"``, ``"prod"``): Ray's address and the d2k cluster's name."""
    body = address[len("ray:"):] if address.startswith("ray:") else address
    name = DEFAULT_NAME
    if "#" in body:
        body, name = body.split("#", 1)
    if body.startswith("//"):
        body = "ray:" + body  # Ray Client: ray://HOST:PORT
    return body or "auto", name or DEFAULT_NAME


def router_actor_name(name: str) -> str:
    return f"d2k-cluster-{name}"


def resolve_endpoint(endpoint: str | None, timeout_s: float = 60.0) -> str | None:
    """The router's ZeroMQ endpoint for a ``ray:`` cluster address; other endpoints unchanged."""
    if not is_cluster_address(endpoint):
        return endpoint
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError(f"{endpoint} is a Ray cluster address: install the cluster extra "
                           "(pip install 'd2k[cluster]') or give the router's tcp:// endpoint") from exc
    address, name = split_address(str(endpoint))
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                 logging_level="WARNING")
    try:
        actor = ray.get_actor(router_actor_name(name), namespace=NAMESPACE)
        return str(ray.get(actor.endpoint.remote(), timeout=timeout_s))
    except ValueError as exc:
        raise RuntimeError(f"no d2k cluster named {name!r} on the Ray cluster at {address} "
                           f"(start one with `python -m d2k.cluster up --address {address}`)") from exc
    finally:
        if started:
            ray.shutdown()

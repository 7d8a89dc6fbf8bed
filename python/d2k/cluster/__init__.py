"""``d2k.cluster``: many ``d2k serve`` behind one protocol-v1 endpoint (docs/scale.md, docs/rl.md).

* :class:`Router` (no Ray needed): one endpoint clients use like a server's; places sessions by
  load, keeps them on their server, ends a dead server's sessions with ``server_lost``
  (:class:`d2k.ServerLost`); CURVE towards servers bound beyond loopback (its own key pair) and,
  with an allowlist, towards its clients.
* :mod:`d2k.cluster.ray_cluster` (``pip install 'd2k[cluster]'``): one ``d2k serve`` per GPU host
  as a Ray actor, the router in a Ray actor, servers joining and leaving as nodes do;
  ``up``/``status``/``down`` and ``python -m d2k.cluster``.
* :func:`resolve_endpoint`: ``"ray://..."``/``"ray:auto"`` cluster addresses to the router's endpoint.
"""
from __future__ import annotations

from .address import is_cluster_address, resolve_endpoint
from .router import SERVER_LOST, Router
from .serve import ServerProcess

__all__ = ["Router", "SERVER_LOST", "ServerProcess", "is_cluster_address", "resolve_endpoint"]

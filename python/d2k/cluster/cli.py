"""``d2k-cluster up|status|down`` (also ``python -m d2k.cluster``): a d2k cluster on a Ray cluster.

    ray start --head --resources '{"d2k_host": 1}'          # on the head; `ray start --address=...` elsewhere
    d2k-cluster up --address auto --wait 1                  # prints the router's endpoint
    d2k-cluster status
    d2k-cluster drain NODE_ID                               # that host's server leaves gracefully
    d2k-cluster down

``up`` starts the detached cluster actor (docs/scale.md, d2k.cluster.ray_cluster): a ``d2k serve``
on every node with the host resource (``GPU`` by default), the router in front of them.
"""
from __future__ import annotations

import argparse
import json
import sys


def _config(args: argparse.Namespace):
    from ..wire import read_public_key
    from .ray_cluster import ClusterConfig
    return ClusterConfig(name=args.name, router_host=args.router_host, router_port=args.router_port,
                         allow_remote=args.allow_remote, router_key=args.router_key,
                         router_allowed_keys=args.router_allowed_keys,
                         server_allow_keys=[read_public_key(k) for k in args.server_allow_key or []],
                         host_resource=args.host_resource, server_host=args.server_host,
                         server_args=list(args.server_arg or []), binary=args.binary,
                         tasks_dir=args.tasks, state_dir=args.state_dir, poll_s=args.poll,
                         dead_after_s=args.dead_after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="d2k-cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--name", default="d2k", help="the d2k cluster's name (default: d2k)")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the router and one d2k serve per host")
    p_up.add_argument("--router-host", default="127.0.0.1",
                      help="router bind address (default 127.0.0.1; '' = its node's address: needs "
                           "--router-allowed-keys, or --allow-remote)")
    p_up.add_argument("--allow-remote", action="store_true",
                      help="let the router bind off loopback WITHOUT keys: trusted networks only")
    p_up.add_argument("--router-key", default=None,
                      help="the router's key pair (`d2k keys server DIR`: DIR/server.key); default: made at start")
    p_up.add_argument("--router-allowed-keys", default=None,
                      help="client public keys the router lets in (CURVE; re-read when it changes)")
    p_up.add_argument("--server-allow-key", action="append",
                      help="one more public key (or .pub file) every server lets in directly, repeatable")
    p_up.add_argument("--router-port", type=int, default=5600, help="router port (0 = free; default 5600)")
    p_up.add_argument("--host-resource", default="GPU",
                      help="nodes with this Ray resource get a server (default GPU)")
    p_up.add_argument("--server-host", default="", help="servers' bind address (default: each node's)")
    p_up.add_argument("--server-arg", action="append",
                      help="one more `d2k serve` option, repeatable (e.g. --server-arg=--no-gpu)")
    p_up.add_argument("--binary", default=None, help="d2k binary on the nodes")
    p_up.add_argument("--tasks", default=None, help="tasks folder on the nodes")
    p_up.add_argument("--state-dir", default=None, help="state folder root on the nodes")
    p_up.add_argument("--poll", type=float, default=2.0, help="supervisor period, seconds")
    p_up.add_argument("--dead-after", type=float, default=15.0,
                      help="a server silent this long is lost, seconds")
    p_up.add_argument("--wait", type=int, default=0, help="wait until this many servers are up")
    sub.add_parser("status", help="servers, sessions and load, as JSON")
    p_drain = sub.add_parser("drain", help="a node's server leaves once its sessions are closed")
    p_drain.add_argument("node_id")
    sub.add_parser("down", help="stop every server and the router")
    args = parser.parse_args(argv)

    from . import ray_cluster as rc
    if args.command == "up":
        endpoint = rc.up(_config(args), address=args.address, wait_servers=args.wait)
        print(endpoint)
    elif args.command == "status":
        json.dump(rc.status(args.name, address=args.address), sys.stdout, indent=2, default=str)
        print()
    elif args.command == "drain":
        import ray
        ray.get(rc.get(args.name, address=args.address).drain.remote(args.node_id))
    elif args.command == "down":
        rc.down(args.name, address=args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())

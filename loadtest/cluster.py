"""A local kefu cluster on 127.0.0.1: Redis, N kefu nodes and Kamailio in front of them.

    python -m loadtest.cluster start --nodes 2 [--media-mode echo] [--dir DIR] [--sip-port P]
    python -m loadtest.cluster status [--dir DIR]
    python -m loadtest.cluster stop [--dir DIR]

``start`` starts a ``redis-server`` (a Unix socket in DIR, no TCP port, no persistence), the
kefu nodes (``loadtest.kefu_process.start_kefu`` on ``127.0.0.1:0``, each with its own state
directory ``DIR/node-K`` and RTP range, all sharing the Redis URL and one JWT secret), then
Kamailio (deploy/kamailio/kamailio.cfg) with the nodes' SIP addresses as dispatcher set 1,
waits until Kamailio has probed every node active, prints one JSON line (also written to
DIR/cluster.json) and returns; the processes keep running in their own sessions, logging
into DIR. ``stop`` stops them by the recorded PIDs: nodes, then Kamailio, then Redis.

From Python: :func:`start_cluster` returns a :class:`Cluster` (tests, benchmarks).
Exit codes: 0 done / everything alive; 1 something failed or is not alive; 2 no cluster is
recorded in DIR (status, stop) or one is already running there (start).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest import cluster_procs as procs
from loadtest.kamailio import (
    KamailioError,
    KamailioProcess,
    find_binary,
    is_active,
    start_kamailio,
)
from loadtest.kefu_process import KefuProcess, start_kefu
from loadtest.redis_peer import RedisPeer, start_redis

__all__ = [
    "Cluster",
    "ClusterError",
    "Node",
    "default_dir",
    "main",
    "missing_peers",
    "start_cluster",
]

LOCALHOST = "127.0.0.1"
RTP_PORTS = (20000, 29999)
"""Split between the nodes: kefu's default range, kept free of peers (docs/TESTING.md)."""
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """A part of the cluster failed to start; the message names it (and its log's end)."""


def missing_peers() -> list[str]:
    """The programs a local cluster needs that are not installed here."""
    return [b for b in ("kamailio", "kamcmd", "redis-server", "sipp") if find_binary(b) is None]


def default_dir() -> Path:
    env = os.environ.get("KEFU_CLUSTER_DIR")
    return Path(env) if env else Path.home() / ".local/state/kefu/cluster"


def rtp_range(k: int, nodes: int, lo: int = RTP_PORTS[0], hi: int = RTP_PORTS[1]) -> str:
    """Node ``k``'s (1-based) share of ``lo..hi``: disjoint, even-aligned blocks."""
    span = ((hi - lo + 1) // nodes) & ~1
    if span < 4:
        raise ValueError(f"{nodes} nodes do not fit in RTP ports {lo}-{hi}")
    first = lo + (k - 1) * span
    return f"{first}-{first + span - 1}"


@dataclass
class Node:
    """One kefu node: ``node-K``, its addresses and (when started here) its process."""

    k: int
    pid: int
    sip: str
    http: str
    rtp: str
    dir: Path
    process: KefuProcess | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return f"node-{self.k}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http}"

    def metric(self, name: str, labels: str = "", default: float = 0.0) -> float:
        """One sample of the node's ``/metrics``."""
        return procs.metric(self.http_url, name, labels, default)

    def info(self) -> dict[str, Any]:
        return {"id": self.id, "pid": self.pid, "sip": self.sip, "http": self.http, "rtp": self.rtp}


@dataclass
class Cluster:
    """A running local cluster; :meth:`stop` ends every process it started."""

    dir: Path
    nodes: dict[int, Node]
    """Node number K (1..N) -> node."""
    kamailio: KamailioProcess
    redis: RedisPeer
    jwt_secret: str
    media_mode: str

    @property
    def entry(self) -> str:
        """Kamailio's SIP address, ``127.0.0.1:P``: where callers send their INVITEs."""
        return self.kamailio.sip

    @property
    def redis_url(self) -> str:
        return self.redis.url

    def info(self) -> dict[str, Any]:
        return {
            "sip": self.entry,
            "redis": self.redis_url,
            "dir": str(self.dir),
            "kamailio_pid": self.kamailio.pid,
            "redis_pid": self.redis.pid,
            "nodes": [n.info() for n in self.nodes.values()],
        }

    def dispatcher_state(self) -> dict[str, str]:
        """``HOST:PORT`` -> dispatcher flags (``AP`` active, ``IP`` inactive, ...)."""
        return {u.removeprefix("sip:"): f for u, f in self.kamailio.dispatcher_state().items()}

    def wait_dispatcher(self, want: Mapping[str, bool], timeout: float) -> dict[str, str]:
        """Wait until each ``HOST:PORT`` in ``want`` is active (True) or not (False)."""

        def ready(state: dict[str, str]) -> bool:
            flags = {u.removeprefix("sip:"): f for u, f in state.items()}
            return all(is_active(flags.get(dst)) == on for dst, on in want.items())

        what = ", ".join(f"{d} {'active' if on else 'inactive'}" for d, on in want.items())
        return self.kamailio.wait_dispatcher(ready, timeout, what)

    def set_destinations(self, extra: Sequence[str] = (), *, active: bool = False) -> None:
        """Dispatcher set 1 = the nodes + ``extra`` ``HOST:PORT`` destinations (a reload that
        keeps active destinations active). New entries enter rotation once they answer a
        probe, or at once with ``active``."""
        nodes = [n.sip for n in self.nodes.values()]
        self.kamailio.reload(nodes + list(extra), active=list(extra) if active else ())

    def kill_node(self, k: int, sig: signal.Signals = signal.SIGKILL) -> None:
        """Send ``sig`` to node K's process group (its own session: the node and its room
        workers); with SIGKILL, wait until it is gone."""
        node = self.nodes[k]
        procs.signal_group(node.pid, sig)
        if sig == signal.SIGKILL and node.process is not None:
            node.process.proc.wait(timeout=10)

    def stop(self, grace: float = 10.0) -> bool:
        """Stop nodes, then Kamailio, then Redis (SIGTERM, SIGKILL after ``grace``); whether
        everything is gone."""
        ok = True
        for node in self.nodes.values():
            if node.process is not None:
                ok &= node.process.stop(timeout=grace) is not None
            else:
                ok &= procs.stop_pid(node.pid, procs.proc_start(node.pid), grace)
        ok &= self.kamailio.stop(grace) is not None
        self.redis.stop(grace)
        ok &= self.redis.proc.returncode is not None
        (self.dir / STATE_FILE).unlink(missing_ok=True)
        return ok

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _node_env(
    cluster_dir: Path, k: int, redis_url: str, secret: str, media_mode: str
) -> dict[str, str]:
    return {
        "KEFU_STATE_REDIS_URL": redis_url,
        "KEFU_CLUSTER_NODE_ID": f"node-{k}",
        "KEFU_AUTH_JWT_SECRET": secret,
        "KEFU_CALLS_MEDIA_MODE": media_mode,
        "KEFU_WEBRTC_ROOM_WORKERS": "1",
        "KEFU_WEBRTC_ICE_HOST_ADDRESSES": LOCALHOST,
        "KEFU_SERVER_STATE_DIR": str(cluster_dir / f"node-{k}"),
        # every call arrives from the Kamailio front: no per-source limits for it
        "KEFU_SIP_RATE_EXEMPT": f"{LOCALHOST}/32",
    }


def _start_node(
    cluster_dir: Path, k: int, n: int, env: dict[str, str], ready_timeout: float
) -> Node:
    node_dir = cluster_dir / f"node-{k}"
    node_dir.mkdir(parents=True, exist_ok=True)
    rtp = rtp_range(k, n)
    try:
        kefu = start_kefu(
            node_dir,
            rtp_ports=rtp,
            env=env,
            log_path=node_dir / "kefu.log",
            ready_timeout=ready_timeout,
        )
    except RuntimeError as exc:
        raise ClusterError(f"node-{k} (kefu) failed to start: {exc}") from None
    return Node(k, kefu.pid, kefu.sip, f"{LOCALHOST}:{kefu.http_port}", rtp, node_dir, kefu)


def _start_nodes(
    cluster_dir: Path,
    count: int,
    shared: tuple[str, str, str],
    extra: Mapping[str, str] | Mapping[int, Mapping[str, str]] | None,
    ready_timeout: float,
) -> dict[int, Node]:
    """Start the nodes at once (each waits on its own /readyz); on any failure stop the ones
    that started and raise the first error. ``shared``: Redis URL, JWT secret, media mode."""

    def env_for(k: int) -> dict[str, str]:
        return {**_node_env(cluster_dir, k, *shared), **_node_env_overrides(extra, k)}

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = {
            k: pool.submit(_start_node, cluster_dir, k, count, env_for(k), ready_timeout)
            for k in range(1, count + 1)
        }
    started, errors = {}, []
    for k, fut in futures.items():
        try:
            started[k] = fut.result()
        except Exception as exc:
            errors.append(exc)
    if errors:
        for node in started.values():
            if node.process is not None:
                node.process.stop(signal.SIGKILL)
        raise errors[0]
    return started


def _node_env_overrides(
    extra: Mapping[str, str] | Mapping[int, Mapping[str, str]] | None, k: int
) -> dict[str, str]:
    """``env`` of :func:`start_cluster`: one mapping for every node, or node K -> mapping."""
    if not extra:
        return {}
    if all(isinstance(key, int) for key in extra):
        return dict(extra.get(k, {}))  # type: ignore[call-overload]
    return {str(key): str(value) for key, value in extra.items()}


def start_cluster(
    cluster_dir: Path,
    nodes: int = 2,
    media_mode: str = "echo",
    env: Mapping[str, str] | Mapping[int, Mapping[str, str]] | None = None,
    sip_port: int | None = None,
    *,
    ping_interval: int = 1,
    kamailio_defines: Mapping[str, str | int] | None = None,
    ready_timeout: float = 240.0,
    active_timeout: float = 20.0,
) -> Cluster:
    """Start Redis, ``nodes`` kefu nodes and Kamailio in ``cluster_dir`` and return once
    Kamailio has probed every node active. ``env`` is laid over every node's environment (or
    ``{K: {...}}`` per node); ``kamailio_defines`` override kamailio.cfg's defines (e.g.
    ``{"FR_TIMER": 1000}``). Raises :class:`ClusterError` naming what failed; whatever had
    started is stopped first."""
    cluster_dir = Path(cluster_dir).resolve()
    cluster_dir.mkdir(parents=True, exist_ok=True)
    secret = procs.write_secret(cluster_dir / "jwt-secret", secrets.token_urlsafe(32))
    redis = start_redis(cluster_dir)
    node_map: dict[int, Node] = {}
    kam: KamailioProcess | None = None
    try:
        shared = (redis.url, secret, media_mode)
        node_map = _start_nodes(cluster_dir, nodes, shared, env, ready_timeout)
        destinations = [n.sip for n in node_map.values()]
        kam = _start_front(cluster_dir, destinations, sip_port, ping_interval, kamailio_defines)
        cluster = Cluster(cluster_dir, node_map, kam, redis, secret, media_mode)
        try:
            cluster.wait_dispatcher({n.sip: True for n in node_map.values()}, active_timeout)
        except (TimeoutError, KamailioError) as exc:
            raise ClusterError(
                f"kamailio did not probe every node active: {exc}\n{kam.log_tail()}"
            ) from None
    except BaseException:
        for node in node_map.values():
            if node.process is not None:
                node.process.stop(timeout=5.0)
        if kam is not None:
            kam.stop()
        redis.stop()
        raise
    procs.write_state(cluster_dir / STATE_FILE, cluster.info(), media_mode=media_mode)
    return cluster


def _start_front(
    cluster_dir: Path,
    destinations: list[str],
    sip_port: int | None,
    ping_interval: int,
    defines: Mapping[str, str | int] | None,
) -> KamailioProcess:
    """Kamailio on ``sip_port``, or on a port from the peer pool (a private namespace), or
    outside one on a free port checked by binding it (retried if Kamailio loses it)."""
    last: Exception | None = None
    for port in procs.front_ports(sip_port):
        try:
            return start_kamailio(
                cluster_dir / "kamailio",
                port,
                destinations,
                ping_interval=ping_interval,
                defines=defines,
            )
        except KamailioError as exc:
            last = exc
            if sip_port is not None or "Address already in use" not in str(exc):
                break
    raise ClusterError(f"kamailio failed to start: {last}")


# --- command line ----------------------------------------------------------------------------


def _cmd_start(args: argparse.Namespace) -> int:
    if procs.live_state(args.dir / STATE_FILE):
        print(f"a cluster is already running in {args.dir} (stop it first)", file=sys.stderr)
        return 2
    try:
        cluster = start_cluster(args.dir, args.nodes, args.media_mode, sip_port=args.sip_port)
    except (ClusterError, procs.ProcessError, RuntimeError, OSError) as exc:
        print(f"cluster start failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(cluster.info()), flush=True)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state = procs.read_state(args.dir / STATE_FILE)
    if state is None:
        print(f"no cluster recorded in {args.dir}", file=sys.stderr)
        return 2
    report = procs.status_report(state, args.dir / "kamailio" / "kamailio.ctl")
    print(json.dumps(report))
    return 0 if report["alive"] else 1


def _cmd_stop(args: argparse.Namespace) -> int:
    state = procs.read_state(args.dir / STATE_FILE)
    if state is None:
        print(f"no cluster recorded in {args.dir}", file=sys.stderr)
        return 2
    ok = procs.stop_recorded(state, args.grace)
    (args.dir / STATE_FILE).unlink(missing_ok=True)
    print(json.dumps({"stopped": ok, "dir": str(args.dir)}))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start Redis, the kefu nodes and Kamailio")
    start.add_argument("--nodes", type=int, default=2)
    start.add_argument("--media-mode", default="echo", choices=["echo", "prompt", "ai"])
    start.add_argument("--sip-port", type=int, default=None)
    status = sub.add_parser("status", help="liveness of every process, dispatcher state")
    stop = sub.add_parser("stop", help="stop everything start started")
    stop.add_argument("--grace", type=float, default=10.0, help="seconds before SIGKILL")
    for p in (start, status, stop):
        p.add_argument("--dir", type=Path, default=default_dir())
    args = parser.parse_args(argv)
    args.dir = args.dir.expanduser().resolve()
    if args.command == "start" and args.nodes < 1:
        parser.error("--nodes must be at least 1")
    return {"start": _cmd_start, "status": _cmd_status, "stop": _cmd_stop}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

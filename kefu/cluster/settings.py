"""The settings of kefu's scale-out: ``[state]`` (Redis) and ``[cluster]`` (this node).

Both are sections of :class:`kefu.mediaserver.config.Config`; without ``state.redis_url``
nothing here is used and kefu keeps its in-process defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Shared state for several nodes (kefu.cluster); empty ``redis_url``: in-process only."""

    redis_url: str = ""
    """``redis://HOST:PORT/DB``, ``rediss://...`` or ``unix:///path/redis.sock``."""
    redis_required: bool = True
    """Refuse to start when Redis cannot be reached (False: start degraded, keep retrying)."""
    dialog_ttl_s: int = 3600
    """How long a call's dialog state outlives its last turn in Redis."""
    buffer_events: int = 10000
    """Events kept for Redis while it is unreachable (the oldest are dropped beyond)."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """This node among several (used when ``state.redis_url`` is set)."""

    node_id: str = ""
    """Unique per node (Kubernetes: the pod name); empty: ``<hostname>-<pid>``."""
    advertise_http: str = ""
    """The URL other nodes use to reach this node's HTTP (``http://10.0.0.5:8080``); empty:
    ``http://`` + the address HTTP is bound to (must then not be 0.0.0.0)."""
    heartbeat_s: float = 1.0
    """How often this node writes its heartbeat (id, addresses, load, calls, rooms)."""
    node_ttl_s: float = 5.0
    """A node whose heartbeat is older than this is gone: its rooms are placed elsewhere."""


def check_cluster(state: StateConfig, cluster: ClusterConfig) -> tuple[str, str] | None:
    """The first problem as (key, message), or None."""
    url = state.redis_url
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        return (
            "state.redis_url",
            f"state.redis_url must start with redis://, rediss:// or unix://, got {url!r}",
        )
    if cluster.node_id and not (
        len(cluster.node_id) <= 64 and all(c.isalnum() or c in "-_." for c in cluster.node_id)
    ):
        return ("cluster.node_id", "cluster.node_id: 1-64 letters, digits, '-', '_' or '.'")
    if cluster.advertise_http and not cluster.advertise_http.startswith(("http://", "https://")):
        return (
            "cluster.advertise_http",
            "cluster.advertise_http must be an http:// or https:// URL",
        )
    if not 0 < cluster.heartbeat_s < cluster.node_ttl_s:
        return (
            "cluster.heartbeat_s",
            "cluster.heartbeat_s must be above 0 and below cluster.node_ttl_s",
        )
    return None

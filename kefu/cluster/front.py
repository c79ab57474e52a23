"""The front process's side of a cluster: what :mod:`kefu.mediaserver.front` wires in.

:func:`wire_cluster` (before the HTTP app starts) gives the signaling relay the cluster's key,
builds the :class:`~kefu.cluster.routing.ClusterRouting` the WebSocket route asks, and mounts
``/api/cluster`` and the forwarding of call control; :func:`start_cluster_front` (once HTTP
and SIP are bound) starts the heartbeat with the node's addresses.

The cluster's key (relayed sockets, forwarded control requests) is derived from the JWT
secret every node already shares, so a cluster needs no second secret.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from aiohttp import web

from kefu.cluster.http_api import add_cluster_routes
from kefu.cluster.routing import ClusterRouting
from kefu.mediaserver.agent_room import AGENT_ROOM_PREFIX
from kefu.mediaserver.config import jwt_secret
from kefu.signaling.relay import ShardRelay

if TYPE_CHECKING:
    from kefu.mediaserver.server import KefuServer

__all__ = ["cluster_key", "start_cluster_front", "wire_cluster"]


def cluster_key(secret: str) -> str:
    """The key nodes of one cluster recognise each other's relayed requests by."""
    return hmac.new(secret.encode(), b"kefu-cluster-relay", hashlib.sha256).hexdigest()


def wire_cluster(server: KefuServer, app: web.Application, relay: ShardRelay) -> ClusterRouting:
    node = server.cluster
    assert node is not None
    key = cluster_key(jwt_secret(server.config))
    relay.cluster_key = key
    relay.node_id = node.node_id
    relay.on_session = node.note_session
    routing = ClusterRouting(
        node, key=key, pinned=server.sip_rooms, agent_room_prefix=AGENT_ROOM_PREFIX
    )
    add_cluster_routes(app, node, key)
    return routing


async def start_cluster_front(server: KefuServer, http_url: str) -> None:
    node = server.cluster
    assert node is not None and server.sip_address is not None
    sip_host, sip_port = server.sip_address
    lo, hi = server.config.rtp.ports
    await node.start(http=http_url, sip=f"{sip_host}:{sip_port}", rtp=f"{lo}-{hi}")

"""Where a signaling socket goes in a cluster: here, or the node hosting its room.

The node that accepts a client's WebSocket reads its first join or resume (as the front does
for its room workers, :mod:`kefu.signaling.shards`) and asks :meth:`ClusterRouting.node_for`:

* ``join`` of a room some live node hosts → that node;
* ``join`` of a new room (or one whose node is gone) → the least-loaded live node
  (:func:`~kefu.cluster.placement.choose_node`), recorded with a claim that exactly one
  node wins when two place the same room at once;
* ``join`` of a phone call's agent room (``call:<call_id>``) → the node hosting the call;
* ``resume`` → the node that issued the session; a session whose node is gone is
  answered here (``unknown_session``: the caller page then joins its room again, on a live
  node, where the AI continues from the dialog state in Redis).

The answer is a node's base URL, or None for "here". With Redis lost every socket is served
here (the node runs on its own until Redis returns).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import structlog

from kefu.cluster.node import ClusterNode
from kefu.cluster.placement import choose_node
from kefu.cluster.redis_link import REDIS_ERRORS
from kefu.signaling.shards import json_object

__all__ = ["ClusterRouting"]

log = structlog.get_logger("kefu.cluster")

PLACED_MEMORY_S = 3.0
"""Rooms this node placed elsewhere count towards that node's load for this long (until its
heartbeat has counted them)."""


class ClusterRouting:
    def __init__(
        self,
        node: ClusterNode,
        *,
        key: str,
        pinned: frozenset[str] = frozenset(),
        agent_room_prefix: str = "call:",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.key = key
        """The cluster's key: a socket relayed here with it is served here."""
        self.pinned = pinned
        self.agent_room_prefix = agent_room_prefix
        self._clock = clock
        self._placed: deque[tuple[float, str]] = deque(maxlen=10_000)
        self.relayed = 0

    def note_session(self, session: str) -> None:
        self.node.note_session(session)

    async def node_for(self, text: str | bytes) -> str | None:
        """The URL of the node that should serve this socket; None: this node."""
        message = json_object(text)
        if message is None or not self.node.link.up:
            return None
        kind = message.get("type")
        try:
            if kind == "join":
                room = message.get("room")
                if not isinstance(room, str) or not room:
                    return None  # the hub answers a malformed join
                owner = await self._room_owner(room)
            elif kind == "resume":
                session = message.get("session")
                if not isinstance(session, str) or not session:
                    return None
                owner = await self.node.registry.session_node(session)
            else:
                return None
        except REDIS_ERRORS as exc:
            self.node.link.failed(exc)
            return None
        if owner is None or owner == self.node.node_id:
            return None
        url = await self._url_of(owner)
        if url is not None:
            self.relayed += 1
        return url

    async def _room_owner(self, room: str) -> str | None:
        registry = self.node.registry
        if room in self.pinned:
            return None  # the SIP room: every node has its own
        if room.startswith(self.agent_room_prefix):
            return await registry.call_node(room[len(self.agent_room_prefix) :])
        owner = await registry.room_node(room)
        if owner is not None:
            return owner
        now = self._clock()
        while self._placed and self._placed[0][0] < now - PLACED_MEMORY_S:
            self._placed.popleft()
        placed: dict[str, int] = {}
        for _, node_id in self._placed:
            placed[node_id] = placed.get(node_id, 0) + 1
        chosen = choose_node(self.node.nodes.values(), placed) or self.node.node_id
        winner = await registry.claim_room(room, chosen)
        self._placed.append((now, winner))
        log.info("cluster.room_placed", room=room, node=winner, chosen=chosen)
        return winner

    async def _url_of(self, node_id: str) -> str | None:
        info = self.node.nodes.get(node_id)
        if info is None:
            info = await self.node.registry.node(node_id)
        if info is None or not info.http:
            return None
        return info.http.rstrip("/")

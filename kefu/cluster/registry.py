"""The registry of nodes and rooms in Redis.

Keys (every one under ``kefu:``):

* ``node:<id>`` — the node's heartbeat (:class:`NodeInfo` as JSON), written every
  ``cluster.heartbeat_s`` with a TTL of ``cluster.node_ttl_s``: a node that stops beating
  (killed, frozen, cut off) is gone when the key expires. Liveness is Redis's clock, not the
  nodes': a node whose clock jumps is still judged by when it last wrote.
* ``room:<room>`` — the node hosting the room. A claim is one Lua script, so when two nodes
  claim the same room exactly one wins; a room whose node is gone can be claimed anew.
* ``call:<call_id>`` — the node hosting a live call (the control API forwards to it).
* ``session:<id>`` — the node that issued a signaling session (a resume on another node is
  relayed there).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["KEY_PREFIX", "NodeInfo", "Registry"]

KEY_PREFIX = "kefu:"
NODE = KEY_PREFIX + "node:"
ROOM = KEY_PREFIX + "room:"
CALL = KEY_PREFIX + "call:"
SESSION = KEY_PREFIX + "session:"

ROOM_TTL_MS = 6 * 3600 * 1000
"""A room's claim outlives a quiet room this long (a claim whose node is gone is void)."""
CALL_TTL_MS = 4 * 3600 * 1000
SESSION_TTL_MS = 3600 * 1000

# KEYS[1] room key; ARGV: node id, TTL ms, node key prefix. Returns the winner.
_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and redis.call('EXISTS', ARGV[3] .. cur) == 1 then
  return cur
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
"""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node's heartbeat."""

    id: str
    http: str
    """The URL other nodes relay signaling to."""
    sip: str
    """HOST:PORT of its SIP listener."""
    rtp: str = ""
    """Its RTP port range (LO-HI)."""
    pid: int = 0
    started: float = 0.0
    """UNIX time the node started."""
    calls: int = 0
    """Live calls: SIP legs and web rooms with an AI."""
    rooms: int = 0
    max_calls: int = 1
    max_rooms: int = 1
    agents: int = 0
    """Human agents connected to its workbench feed."""
    draining: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> NodeInfo | None:
        """None for anything that is not a heartbeat (a foreign key, a half-written value)."""
        try:
            raw = json.loads(text)
            return cls(**raw) if isinstance(raw, dict) else None
        except (ValueError, TypeError):
            return None


class Registry:
    """Reads and writes the registry; every method may raise one of REDIS_ERRORS."""

    def __init__(self, client: Any, node_id: str, *, node_ttl_s: float) -> None:
        self.r = client
        self.node_id = node_id
        self.node_ttl_ms = max(1, int(node_ttl_s * 1000))
        self._claim = client.register_script(_CLAIM)

    async def beat(self, info: NodeInfo) -> None:
        await self.r.set(NODE + info.id, info.to_json(), px=self.node_ttl_ms)

    async def leave(self) -> None:
        """A clean stop: the node is gone at once, not when its heartbeat expires."""
        await self.r.delete(NODE + self.node_id)

    async def nodes(self) -> list[NodeInfo]:
        keys = [key async for key in self.r.scan_iter(match=NODE + "*", count=200)]
        if not keys:
            return []
        values = await self.r.mget(keys)
        found = (NodeInfo.from_json(v) for v in values if v is not None)
        return sorted((n for n in found if n is not None), key=lambda n: n.id)

    async def node(self, node_id: str) -> NodeInfo | None:
        raw = await self.r.get(NODE + node_id)
        return NodeInfo.from_json(raw) if raw is not None else None

    async def claim_room(self, room: str, node_id: str) -> str:
        """Record ``node_id`` as the room's host unless a live node holds it; the winner."""
        return str(await self._claim(keys=[ROOM + room], args=[node_id, ROOM_TTL_MS, NODE]))

    async def room_node(self, room: str) -> str | None:
        """The live node hosting ``room``; None when nobody (alive) does."""
        return await self._live(await self.r.get(ROOM + room))

    async def rooms(self) -> dict[str, str]:
        """Every room with a live node: room -> node id."""
        return await self._live_map(ROOM)

    async def note_call(self, call_id: str, *, live: bool) -> None:
        if live:
            await self.r.set(CALL + call_id, self.node_id, px=CALL_TTL_MS)
        else:
            await self.r.delete(CALL + call_id)

    async def call_node(self, call_id: str) -> str | None:
        return await self._live(await self.r.get(CALL + call_id))

    async def note_session(self, session: str) -> None:
        await self.r.set(SESSION + session, self.node_id, px=SESSION_TTL_MS)

    async def session_node(self, session: str) -> str | None:
        return await self._live(await self.r.get(SESSION + session))

    async def _live(self, node_id: str | None) -> str | None:
        if node_id is None:
            return None
        return node_id if await self.r.exists(NODE + node_id) else None

    async def _live_map(self, prefix: str) -> dict[str, str]:
        keys = [key async for key in self.r.scan_iter(match=prefix + "*", count=500)]
        if not keys:
            return {}
        owners = await self.r.mget(keys)
        alive = {n.id for n in await self.nodes()}
        return {
            key[len(prefix) :]: owner
            for key, owner in zip(keys, owners, strict=True)
            if owner is not None and owner in alive
        }

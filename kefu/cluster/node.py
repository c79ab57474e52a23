"""This node in a cluster: its heartbeat, its share of the registry, the shared bus and state.

Built by the server when ``state.redis_url`` is set (:func:`ClusterNode.start`); the front
process runs all of it, a room worker only the replicated dialog state (its events reach
Redis through its front). Parts:

* :class:`~kefu.cluster.redis_link.RedisLink` — the connection and whether Redis is up;
* the heartbeat (:class:`~kefu.cluster.registry.NodeInfo` every ``cluster.heartbeat_s``) and
  the calls this node hosts, so the control API on any node can find a call's node;
* :class:`~kefu.cluster.events_bridge.EventsBridge` — the event bus across nodes;
* :class:`~kefu.cluster.dialog_store.ReplicatedSessionStore` — dialog state each turn;
* :class:`~kefu.cluster.routing.ClusterRouting` — where a signaling socket's room lives.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import structlog

from kefu.cluster.dialog_store import ReplicatedSessionStore
from kefu.cluster.events_bridge import EventsBridge
from kefu.cluster.redis_link import REDIS_ERRORS, RedisLink, stop_tasks
from kefu.cluster.registry import NodeInfo, Registry
from kefu.cluster.settings import ClusterConfig, StateConfig
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import CallEnded, CallStarted, RelayedEvent

__all__ = ["ClusterNode", "Hosted", "NodeLoad", "node_id_of"]

log = structlog.get_logger("kefu.cluster")

CALL_NOTES = 10_000
"""Call starts and ends waiting for Redis at most (beyond: dropped, the TTL cleans up)."""


@dataclass(frozen=True, slots=True)
class Hosted:
    """What this node hosts: written back to Redis after an outage (a restarted Redis is
    empty; without this a room here could be placed anew on another node)."""

    rooms: list[str]
    calls: list[str]


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What the heartbeat reports of this node's work, read from the server each beat."""

    calls: int
    rooms: int
    max_calls: int
    max_rooms: int
    agents: int
    draining: bool


def node_id_of(cluster: ClusterConfig) -> str:
    return cluster.node_id or f"{socket.gethostname()}-{os.getpid()}"


class ClusterNode:
    def __init__(
        self,
        state: StateConfig,
        cluster: ClusterConfig,
        *,
        bus: EventBus | None,
        load: Callable[[], NodeLoad] | None = None,
        hosted: Callable[[], Hosted] | None = None,
    ) -> None:
        self.state = state
        self.settings = cluster
        self.node_id = node_id_of(cluster)
        self.link = RedisLink(state.redis_url, interval_s=cluster.heartbeat_s)
        self.registry = Registry(self.link.client, self.node_id, node_ttl_s=cluster.node_ttl_s)
        self.store = ReplicatedSessionStore(self.link, ttl_s=state.dialog_ttl_s)
        self.bus = bus
        self.bridge = (
            EventsBridge(self.link, bus, self.node_id, buffer=state.buffer_events)
            if bus is not None
            else None
        )
        self._load = load
        self._hosted = hosted
        self._synced_outages = 0
        """Redis outages this node has written its rooms and calls back after."""
        self.info: NodeInfo | None = None
        self.nodes: dict[str, NodeInfo] = {}
        """Every live node as of the last heartbeat (this one included)."""
        self._call_notes: asyncio.Queue[tuple[str, bool]] = asyncio.Queue(CALL_NOTES)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def front(self) -> bool:
        return self.bridge is not None

    async def connect(self) -> None:
        """Reach Redis: StateUnavailable (naming the URL) when it is required and cannot be
        reached; otherwise the node starts degraded and keeps trying."""
        await self.link.connect(required=self.state.redis_required)

    async def start(self, *, http: str = "", sip: str = "", rtp: str = "") -> None:
        """Run: the watchdog, the writers, and on a front the heartbeat and the bus."""
        self._spawn(self.link.watch(), "redis-watch")
        self._spawn(self.store.run_writer(), "dialog-writer")
        if self.bridge is None:
            return
        self.info = NodeInfo(
            self.node_id,
            self.settings.advertise_http or http,
            sip,
            rtp=rtp,
            pid=os.getpid(),
            started=round(time.time(), 3),
        )
        assert self.bus is not None
        await self.bridge.start_reading()
        self.bus.attach(self.bridge.read)
        self.bus.attach(self._note_call)
        self._spawn(self.bridge.run_writer(), "events-writer")
        self._spawn(self.bridge.run_reader(), "events-reader")
        self._spawn(self._write_calls(), "calls-writer")
        await self.beat()
        self._spawn(self._beat_forever(), "heartbeat")
        log.info("cluster.joined", node=self.node_id, http=self.info.http, redis=self.link.up)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"cluster-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster.task_failed", task=task.get_name(), error=repr(task.exception()))

    # --- heartbeat --------------------------------------------------------------------------

    async def beat(self) -> None:
        """Write this node's heartbeat and read everyone's (Redis lost: logged, retried)."""
        assert self.info is not None
        if self._load is not None:
            load = self._load()
            self.info = replace(
                self.info,
                calls=load.calls,
                rooms=load.rooms,
                max_calls=load.max_calls,
                max_rooms=load.max_rooms,
                agents=load.agents,
                draining=load.draining,
            )
        try:
            await self.registry.beat(self.info)
            nodes = await self.registry.nodes()
            if self.link.outages > self._synced_outages:
                await self._write_back()
        except REDIS_ERRORS as exc:
            self.link.failed(exc)
            return
        self.nodes = {n.id: n for n in nodes}

    async def _write_back(self) -> None:
        """Redis is back after an outage: claim this node's rooms and calls again, and queue
        every call's dialog state (the writer sends them)."""
        outages = self.link.outages
        hosted = self._hosted() if self._hosted is not None else Hosted([], [])
        lost = [
            r
            for r in hosted.rooms
            if await self.registry.claim_room(r, self.node_id) != self.node_id
        ]
        for call_id in hosted.calls:
            await self.registry.note_call(call_id, live=True)
        dialogs = self.store.resync()
        self._synced_outages = outages
        log.info(
            "cluster.resynced",
            rooms=len(hosted.rooms),
            calls=len(hosted.calls),
            dialogs=dialogs,
            rooms_taken_meanwhile=lost,
        )

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_s)
            await self.beat()

    def agents_online(self) -> int:
        """Agents with a workbench open on any live node (this one's from its last beat)."""
        return sum(n.agents for n in self.nodes.values() if n.id != self.node_id)

    # --- calls ------------------------------------------------------------------------------

    def _note_call(self, event: object) -> None:
        """A bus sink: record where this node's calls (and its workers') live."""
        if isinstance(event, RelayedEvent):
            if event.node:
                return
            kind = event.body.get("type")
            live = True if kind == "call.started" else False if kind == "call.ended" else None
        else:
            live = (
                True
                if isinstance(event, CallStarted)
                else False
                if isinstance(event, CallEnded)
                else None
            )
        if live is None:
            return
        call_id = getattr(event, "call_id", "")
        if not self._call_notes.full():
            self._call_notes.put_nowait((call_id, live))

    async def _write_calls(self) -> None:
        while True:
            call_id, live = await self._call_notes.get()
            while True:
                try:
                    await self.registry.note_call(call_id, live=live)
                    break
                except REDIS_ERRORS as exc:
                    self.link.failed(exc)
                    await self.link.wait_up()

    def note_session(self, session: str) -> None:
        """A signaling session was issued here: resumes through other nodes come here."""
        self._spawn(self._note_session(session), "session")

    async def _note_session(self, session: str) -> None:
        if not self.link.up:
            return
        try:
            await self.registry.note_session(session)
        except REDIS_ERRORS as exc:
            self.link.failed(exc)

    # --- what /readyz and /api/cluster show ------------------------------------------------

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node_id,
            "redis": self.link.describe(),
            "degraded": not self.link.up,
            "dialog": self.store.describe(),
        }
        if self.bridge is not None:
            out["events"] = self.bridge.describe()
            out["nodes"] = len(self.nodes)
        return out

    async def view(self) -> dict[str, Any]:
        """Every live node and every room with its node, read from Redis now."""
        nodes = await self.registry.nodes()
        rooms = await self.registry.rooms()
        return {
            "node": self.node_id,
            "nodes": [{**asdict(n), "self": n.id == self.node_id} for n in nodes],
            "rooms": [{"room": room, "node": node} for room, node in sorted(rooms.items())],
        }

    async def stop(self) -> None:
        if self.bridge is not None and self.link.up:
            try:
                await self.registry.leave()
            except REDIS_ERRORS:
                pass
        await stop_tasks(list(self._tasks))
        if self.bridge is not None:
            await self.bridge.close()
        await self.link.close()

"""The kefu server: one facade over the parts of a running process.

Where each job lives:

* :mod:`~kefu.mediaserver.front` — the front process (SIP, HTTP, room shard 0, the workers);
* :mod:`~kefu.mediaserver.room_worker` — a room worker process (rooms only, on a Unix socket);
* :mod:`~kefu.mediaserver.calls` — the call lifecycle (the live calls, their teardown);
* :mod:`~kefu.mediaserver.call` / :mod:`~kefu.mediaserver.call_state` — one call's controller
  and its state table;
* :mod:`~kefu.mediaserver.sip_dispatch` — the SIP transport, the user agent's events,
  admission; :mod:`~kefu.mediaserver.sip_leg` — answering a call's INVITE, re-INVITEs, REFER;
* :mod:`~kefu.mediaserver.media_modes` — what a call plays (AI, prompt, echo, a room) and the
  AI's models;
* :mod:`~kefu.mediaserver.control` — the HTTP control surface (readiness, metrics, call API).

:class:`KefuServer` builds them, starts the process as a front or a room worker, drains and
stops; :func:`run_server` runs one until SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
from typing import Any

import structlog
from aiohttp import web

from kefu.ai_bridge.events import HandoffRequested
from kefu.ai_bridge.services import AiServices
from kefu.cluster.node import ClusterNode, Hosted, NodeLoad
from kefu.mediaserver.agent_queue import AgentQueue, tell_caller_no_agent
from kefu.mediaserver.agent_queue import Call as QueuedCall
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.calls import CallLifecycle
from kefu.mediaserver.config import Config, jwt_secret
from kefu.mediaserver.control import CallControl
from kefu.mediaserver.front import start_front
from kefu.mediaserver.logs import configure_logging
from kefu.mediaserver.media_modes import MediaModes
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.recording import (
    RecordingPolicy,
    RecordingWriter,
    prepare_dir,
    prune,
    recordings_path,
)
from kefu.mediaserver.room_calls import RoomCall, room_call_id
from kefu.mediaserver.room_worker import start_room_worker, stop_when_orphaned
from kefu.mediaserver.room_workers import RoomWorkers, WorkerSpec
from kefu.mediaserver.rooms import RoomService
from kefu.mediaserver.sip_dispatch import SipDispatch, transfer_target
from kefu.mediaserver.tasks import ServerTasks
from kefu.mediaserver.worker_link import WorkerLink
from kefu.privacy.seal import Sealer, load_key
from kefu.rtp.ports import PortAllocator
from kefu.sfu.api import PeerSettings, Sfu
from kefu.signaling.hub import SignalingHub
from kefu.signaling.relay import ShardRelay
from kefu.signaling.settings import SignalingSettings

__all__ = ["KefuServer", "room_shards", "run_server", "transfer_target"]

log = structlog.get_logger("kefu.server")


def room_shards(config: Config) -> int:
    """How many processes host WebRTC rooms (``webrtc.room_workers``; 0 = one per CPU)."""
    wanted = config.webrtc.room_workers
    return wanted if wanted > 0 else max(1, os.cpu_count() or 1)


class KefuServer:
    """The front (``worker=None``: SIP, HTTP, room shard 0) or one room worker."""

    def __init__(
        self, config: Config, *, worker: WorkerSpec | None = None, uvloop_ok: bool = True
    ) -> None:
        self.config = config
        self.worker = worker
        self.shards = room_shards(config)
        self.uvloop_ok = uvloop_ok
        self.room_workers: RoomWorkers | None = None
        self.relay: ShardRelay | None = None
        self.worker_link: WorkerLink | None = None
        """The front's view of the calls its room workers host (None: no workers)."""
        self.http: web.AppRunner | None = None
        self.sip_address: tuple[str, int] | None = None
        self.sip_tls_address: tuple[str, int] | None = None
        """The SIP-over-TLS listener's address (``sip.tls_listen``), None when off."""
        self.http_address: tuple[str, int] | None = None
        self.metrics = Metrics()
        self.bus = EventBus()
        self.ports = PortAllocator(*config.rtp.ports)
        self.tasks = ServerTasks()
        self.lifecycle = CallLifecycle(self.metrics, self.bus, self.tasks)
        self.control = CallControl(self)
        webrtc = config.webrtc
        peer = PeerSettings(
            ice_servers=tuple({"urls": [url]} for url in webrtc.stun_urls),
            ice_host_addresses=webrtc.ice_host_addresses or None,
            max_participants_per_room=webrtc.max_participants_per_room,
            # The node's room limit, shared out: rooms are spread evenly by their id's hash.
            max_rooms=math.ceil(webrtc.max_rooms / self.shards),
        )
        sip_room = config.calls.sip_room
        # The SIP room: SIP legs join it in this process, and it has no bot.
        self.sip_rooms = frozenset({sip_room}) if sip_room else frozenset()
        self.rooms = RoomService(
            Sfu(peer),
            no_bot_rooms=self.sip_rooms,
            bus=self.bus,
            agent_grace_s=config.calls.agent_grace_s,
        )
        self.metrics.watch_sfu(self.control.sfu_stats)
        self.signaling = SignalingHub(
            self.rooms,
            SignalingSettings(
                jwt_secret=jwt_secret(config),
                jwks_url=config.auth.jwks_url,
                turn_secret=webrtc.turn_secret,
                turn_urls=webrtc.turn_urls,
                stun_urls=webrtc.stun_urls,
                turn_ttl_s=webrtc.turn_ttl_s,
            ),
        )
        self.media = MediaModes(
            config, self.metrics, self.bus, self.rooms, on_handoff=self._handoff
        )
        self.dispatch = SipDispatch(
            config,
            metrics=self.metrics,
            bus=self.bus,
            ports=self.ports,
            lifecycle=self.lifecycle,
            media=self.media,
        )
        self.ua = self.dispatch.ua
        self.sip = self.dispatch.sip
        self.agent_queue = AgentQueue(
            self.bus.publish,
            agents_online=self.control.agents_online,
            wait_s=config.calls.agent_wait_s,
            fallback=self._no_agent,
        )
        self.bus.attach(self.agent_queue.read)
        self.bus.attach(self._room_handoff)
        self.bus.attach(self.metrics.count_event)
        self.cluster: ClusterNode | None = None
        """This node's part in a cluster (``state.redis_url`` set); a worker only replicates
        its dialog state."""
        if config.state.redis_url:
            self.cluster = ClusterNode(
                config.state,
                config.cluster,
                bus=self.bus if worker is None else None,
                load=self._node_load,
                hosted=self._hosted,
            )
            self.media.session_store = self.cluster.store
        self.recordings: RecordingWriter | None = None
        if RecordingPolicy.from_config(config.calls).enabled and worker is None:
            key = config.privacy.key_file
            self.recordings = RecordingWriter(
                prepare_dir(recordings_path(config)),
                on_result=lambda result: self.metrics.recordings.labels(result).inc(),
                sealer=Sealer(load_key(key)) if key else None,
            )
            self.media.recordings = self.recordings

    # --- what tests, the CLI and the control surface read -------------------------------------

    @property
    def calls(self) -> dict[str, Call]:
        """The live calls, by SIP leg handle."""
        return self.lifecycle.calls

    @property
    def _idle(self) -> asyncio.Event:
        """Set while no call is live."""
        return self.lifecycle.idle

    @property
    def draining(self) -> bool:
        return self.dispatch.draining

    @property
    def ai(self) -> AiServices | None:
        return self.media.ai

    @property
    def ai_loading(self) -> bool:
        return self.media.ai_loading

    @property
    def media_host(self) -> str:
        return self.dispatch.answerer.media_host

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """Run a task owned by the server (cancelled at stop; a failure is logged)."""
        return self.tasks.spawn(coro, name)

    def _handoff(self, call: Call, reason: str) -> None:
        """The AI asked for a human: wait for an agent on the workbench, else transfer."""
        self.agent_queue.request(call, reason)

    def _room_handoff(self, event: object) -> None:
        """A bus sink: a web caller's AI asked for a human (the call hosted here waits)."""
        if isinstance(event, HandoffRequested):
            room_call = self.rooms.calls.get(event.call_id)
            if room_call is not None and room_call.state is CallState.AI_ACTIVE:
                self.agent_queue.request(room_call, event.reason)

    def _node_load(self) -> NodeLoad:
        """What this node's heartbeat reports (kefu.cluster)."""
        events = self.control.events
        return NodeLoad(
            calls=len(self.calls) + len(self.rooms.calls),
            rooms=self.control.sfu_stats().get("rooms", 0),
            max_calls=self.config.calls.max_concurrent,
            max_rooms=self.config.webrtc.max_rooms,
            agents=events.agents_online() if events is not None else 0,
            draining=self.draining,
        )

    def _hosted(self) -> Hosted:
        """The rooms (this process's and its workers') and calls this node hosts."""
        rooms = self.rooms.sfu.room_ids()
        if self.room_workers is not None:
            for shard in range(1, self.shards):
                rooms += self.room_workers.room_ids(shard) or []
        calls = [call.id for call in self.calls.values()]
        calls += [room_call_id(room) for room in rooms]
        return Hosted(rooms, calls)

    def _no_agent(self, call: QueuedCall) -> None:
        """Nobody can take ``call``: a phone call goes to the queue's SIP target, a web
        caller is told the AI stays with them."""
        if isinstance(call, Call):
            self.dispatch.handoff(call)
        elif isinstance(call, RoomCall) and call.state is CallState.AI_ACTIVE:
            tell_caller_no_agent(call.agent, call.spawn)

    # --- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self.cluster is not None:
            # Before anything binds: a Redis that is required and absent stops the start.
            await self.cluster.connect()
        if self.config.calls.media_mode == "ai":
            # Models take seconds to load: serve SIP and HTTP meanwhile, answering INVITEs
            # with 503 + Retry-After and /readyz with 503 until they are in.
            self.spawn(self.media.load_ai(), "ai-load")
        if self.worker is not None:
            await start_room_worker(self, self.worker)
            if self.cluster is not None:
                await self.cluster.start()
        else:
            await start_front(self)
        if self.recordings is not None:
            self.spawn(self._prune_recordings(), "recordings-prune")

    async def _prune_recordings(self) -> None:
        """Hourly: delete recordings older than ``calls.recording_retention_days``."""
        assert self.recordings is not None
        days = self.config.calls.recording_retention_days
        while True:
            gone = await asyncio.to_thread(prune, self.recordings.directory, days)
            if gone:
                log.info("recordings_pruned", files=gone, retention_days=days)
            await asyncio.sleep(3600.0)

    async def drain(self, grace: float | None = None) -> None:
        """Refuse new calls (503) and wait for calls in progress, then hang up the rest."""
        self.dispatch.draining = True
        self.ua.draining = True
        log.info("draining", active_calls=len(self.calls))
        grace = self.config.calls.drain_timeout if grace is None else grace
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        for call in list(self.calls.values()):
            self.lifecycle.hangup(call, "drain timeout")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 2.0)

    async def stop(self) -> None:
        if self.cluster is not None:
            await self.cluster.stop()
        await self.lifecycle.end_all("shutdown")
        if self.recordings is not None:
            await asyncio.to_thread(self.recordings.close)
        self.agent_queue.close()
        await self.sip.close()
        if self.worker_link is not None:
            await self.worker_link.close()
        if self.room_workers is not None:
            # Workers first: their hubs say bye (shutdown) through the relays still open.
            await self.room_workers.close(self.config.calls.drain_timeout + 5.0)
        if self.relay is not None:
            await self.relay.close()
        if self.http:
            await self.http.cleanup()
        await self.rooms.close()
        if self.media.ai is not None:
            await self.media.ai.close()
        await self.tasks.cancel_all()
        log.info("kefu_stopped")

    async def sweep_rooms(self) -> None:
        """Every 5 s: drop participants gone quiet, and bots left alone in their room."""
        while True:
            await asyncio.sleep(5.0)
            try:
                await self.rooms.sweep()
            except Exception:
                log.exception("room_sweep_failed")

    # --- the HTTP control surface (kefu.mediaserver.control) ---------------------------------

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return self.control.ready()

    def metrics_text(self) -> bytes:
        return self.control.metrics_text()

    async def list_calls(self) -> list[dict[str, Any]]:
        return await self.control.list_calls()

    def transfer(self, call_id: str, target: str | None) -> None:
        self.control.transfer(call_id, target)

    def hangup(self, call_id: str) -> None:
        self.control.hangup(call_id)

    async def listen(self, call_id: str, who: str = "api") -> dict[str, Any]:
        return await self.control.listen(call_id, who)

    async def takeover(self, call_id: str, who: str = "api") -> dict[str, Any]:
        return await self.control.takeover(call_id, who)

    async def handback(self, call_id: str, who: str = "api") -> dict[str, Any]:
        return await self.control.handback(call_id, who)

    def _http_app(self) -> web.Application:
        return self.control.http_app()


async def run_server(
    config: Config, *, worker: WorkerSpec | None = None, uvloop_ok: bool = True
) -> int:
    configure_logging(config.log.level, json=config.log.json)
    server = KefuServer(config, worker=worker, uvloop_ok=uvloop_ok)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if worker is None:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    else:
        # Ctrl-C reaches the whole process group: the front stops its workers in order.
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        server.spawn(stop_when_orphaned(worker.front_pid, stop), "front-watch")
    await stop.wait()
    log.info("signal_received", action="drain")
    drain = asyncio.create_task(server.drain())
    stop.clear()
    # A second signal skips the drain.
    second = asyncio.create_task(stop.wait())
    await asyncio.wait({drain, second}, return_when=asyncio.FIRST_COMPLETED)
    drain.cancel()
    second.cancel()
    await server.stop()
    return 0

"""The kefu server: SIP trunk + RTP media + HTTP, wired together.

The SIP user agent is sans-IO; this module reacts to its events (new call, ACK, BYE, CANCEL,
re-INVITE, DTMF, REFER progress) and drives the media side. Everything a call owns (RTP
ports, tasks, tracks) is released in :meth:`KefuServer._end_call`, whatever ended the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog
from aiohttp import web
from aiortc.mediastreams import MediaStreamTrack

from kefu.ai_bridge.agent import CallAgent, HandoffRequested
from kefu.ai_bridge.services import AiServices
from kefu.ai_bridge.settings import AiSettings
from kefu.codecs.info import codec_info
from kefu.errors import ResourceExhausted, SdpError
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallInput, CallState
from kefu.mediaserver.config import Config, jwt_secret
from kefu.mediaserver.events import (
    CallEnded,
    CallStarted,
    DtmfReceived,
    TransferProgress,
    event_json,
)
from kefu.mediaserver.logs import configure_logging
from kefu.mediaserver.media import PcmTrack, PromptThenEcho, chime, load_wav
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.room_workers import STATUS_PATH, RoomWorkers, WorkerSpec, wait_exited
from kefu.mediaserver.rooms import RoomService
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.ports import PortAllocator
from kefu.sfu.api import PeerSettings, Sfu
from kefu.signaling.api_access import TransferAllowList
from kefu.signaling.events_ws import add_event_routes
from kefu.signaling.http import build_app
from kefu.signaling.hub import SignalingHub
from kefu.signaling.relay import ShardRelay
from kefu.signaling.settings import SignalingSettings
from kefu.signaling.shards import ShardRouter
from kefu.signaling.ws import READ_LIMIT, add_signaling_routes, key_matches
from kefu.sip import ua as sipua
from kefu.sip import ua_events as sipev
from kefu.sip.admission import AdmissionLimits
from kefu.sip.aio import SipTransport, TcpLimits
from kefu.sip.offer_answer import answer_offer, warning_for
from kefu.sip.sdp import SessionDescription
from kefu.sip.ua_leg import KNOWN_METHODS
from kefu.sip.uri import SipUri

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
        self.room_workers: RoomWorkers | None = None
        self.relay: ShardRelay | None = None
        self._uvloop_ok = uvloop_ok
        self.metrics = Metrics()
        self.bus = EventBus()
        self.ports = PortAllocator(*config.rtp.ports)
        self.ua = sipua.UserAgent(sipua.UaSettings.from_config(config))
        sip = config.sip
        self.sip = SipTransport(
            self.ua,
            self._pump,
            tcp_limits=TcpLimits(
                max_connections=sip.tcp_max_connections,
                max_connections_per_source=sip.tcp_max_connections_per_source,
                idle_timeout=sip.tcp_idle_timeout,
                message_timeout=sip.tcp_message_timeout,
                max_message_bytes=sip.max_message_bytes,
            ),
            admission=AdmissionLimits(
                rate=sip.rate_limit, burst=sip.rate_burst, exempt=sip.rate_exempt
            ),
            on_drop=lambda reason: self.metrics.sip_dropped.labels(reason).inc(),
            in_use=lambda peer: any(c.source == str(peer) for c in self.calls.values()),
        )
        self._unacked: dict[str, set[str]] = {}
        """Source IP -> legs accepted from it and not yet ACKed (calls.max_unacked_per_source)."""
        self.calls: dict[str, Call] = {}
        self.draining = False
        self._pumping = False
        self._http: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.ai: AiServices | None = None
        self.sip_address: tuple[str, int] | None = None
        self.http_address: tuple[str, int] | None = None
        peer = PeerSettings(
            ice_servers=tuple({"urls": [url]} for url in config.webrtc.stun_urls),
            ice_host_addresses=config.webrtc.ice_host_addresses or None,
            max_participants_per_room=config.webrtc.max_participants_per_room,
            # The node's room limit, shared out: rooms are spread evenly by their id's hash.
            max_rooms=math.ceil(config.webrtc.max_rooms / self.shards),
        )
        sip_room = config.calls.sip_room
        # The SIP room: SIP legs join it in this process, and it has no bot.
        self._sip_rooms = frozenset({sip_room}) if sip_room else frozenset()
        self.rooms = RoomService(Sfu(peer), no_bot_rooms=self._sip_rooms)
        self.metrics.watch_sfu(self._sfu_stats)
        self.signaling = SignalingHub(
            self.rooms,
            SignalingSettings(
                jwt_secret=jwt_secret(config),
                jwks_url=config.auth.jwks_url,
                turn_secret=config.webrtc.turn_secret,
                turn_urls=config.webrtc.turn_urls,
                stun_urls=config.webrtc.stun_urls,
                turn_ttl_s=config.webrtc.turn_ttl_s,
            ),
        )
        self._prompt = None
        if config.calls.media_mode == "prompt" and config.calls.prompt_wav:
            self._prompt = load_wav(config.calls.prompt_wav)

    @property
    def media_host(self) -> str:
        return self.config.sip.public_address or self.config.sip.listen.host

    # --- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.calls.media_mode == "ai":
            # Models take seconds to load: serve SIP and HTTP meanwhile, answering INVITEs
            # with 503 + Retry-After and /readyz with 503 until they are in.
            self._spawn(self._load_ai(), "ai-load")
        if self.worker is not None:
            await self._start_room_worker(self.worker)
            return
        listen = self.config.sip.listen
        self.sip_address = await self.sip.start(listen.host, listen.port)
        self.ua.set_local_address(*self.sip_address)
        if self.shards > 1:
            self.room_workers = RoomWorkers(self.config, self.shards - 1, uvloop_ok=self._uvloop_ok)
            await self.room_workers.start()
            router = ShardRouter(
                self.shards,
                pinned=self._sip_rooms,
                resume_grace_s=self.signaling.settings.resume_grace_s + 5.0,
            )
            self.relay = ShardRelay(
                router, self.room_workers.socket_for, self.room_workers.key, read_limit=READ_LIMIT
            )
        app = self._http_app()
        add_signaling_routes(app, self.signaling, relay=self.relay)
        self._http = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._http.setup()
        site = web.TCPSite(self._http, self.config.http.listen.host, self.config.http.listen.port)
        await site.start()
        host, port = self._http.addresses[0][:2]
        self.http_address = (host, port)
        self._spawn(self.metrics.watch_loop_lag(), "loop-lag")
        self._spawn(self._sweep_rooms(), "room-sweep")
        log.info(
            "kefu_started",
            sip=f"{self.sip_address[0]}:{self.sip_address[1]}",
            http=f"{host}:{port}",
            media_mode=self.config.calls.media_mode,
            rtp_ports="{}-{}".format(*self.config.rtp.ports),
            room_shards=self.shards,
        )

    async def _start_room_worker(self, spec: WorkerSpec) -> None:
        """Serve rooms on the Unix socket the front relays to; no SIP here."""
        structlog.contextvars.bind_contextvars(room_worker=spec.shard)
        app = self._http_app()
        add_signaling_routes(app, self.signaling, relay_key=spec.key)

        async def status(request: web.Request) -> web.Response:
            if not key_matches(request, spec.key):
                return web.json_response({"error": {"code": "forbidden"}}, status=403)
            ready, _ = self.ready()
            return web.json_response(
                {"ready": ready, "pid": os.getpid(), "sfu": self.rooms.sfu.stats()}
            )

        app.router.add_get(STATUS_PATH, status)
        self._http = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._http.setup()
        await web.UnixSite(self._http, spec.socket_path).start()
        self._spawn(self.metrics.watch_loop_lag(), "loop-lag")
        self._spawn(self._sweep_rooms(), "room-sweep")
        log.info("room_worker_started", shard=spec.shard, socket=spec.socket_path)

    async def drain(self, grace: float | None = None) -> None:
        """Refuse new calls (503) and wait for calls in progress, then hang up the rest."""
        self.draining = True
        self.ua.draining = True
        log.info("draining", active_calls=len(self.calls))
        grace = self.config.calls.drain_timeout if grace is None else grace
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        for call in list(self.calls.values()):
            self._hangup(call, "drain timeout")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), 2.0)

    async def stop(self) -> None:
        for call in list(self.calls.values()):
            await self._end_call(call, "shutdown", CallInput.HANGUP)
        await self.sip.close()
        if self.room_workers is not None:
            # Workers first: their hubs say bye (shutdown) through the relays still open.
            await self.room_workers.close(self.config.calls.drain_timeout + 5.0)
        if self.relay is not None:
            await self.relay.close()
        if self._http:
            await self._http.cleanup()
        await self.rooms.close()
        if self.ai is not None:
            await self.ai.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        log.info("kefu_stopped")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """Forget a finished task; one that failed is logged (never lost with the task)."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("task_failed", task=task.get_name(), exc_info=exc)

    async def _load_ai(self) -> None:
        t0 = time.monotonic()
        ai = await AiServices.start(self._ai_settings(), registry=self.metrics.registry)
        self.ai = ai
        self.rooms.make_bot = self._room_agent
        log.info("ai_loaded", seconds=round(time.monotonic() - t0, 1), ready=ai.ready)

    @property
    def ai_loading(self) -> bool:
        return self.config.calls.media_mode == "ai" and self.ai is None

    def _ai_settings(self) -> AiSettings:
        ai = self.config.ai
        state = self.config.state_path
        kb_dir = ai.kb_dir
        if kb_dir is None and (state / "kb" / "meta.json").exists():
            kb_dir = str(state / "kb")
        return replace(ai, cache_dir=ai.cache_dir or str(state / "cache"), kb_dir=kb_dir)

    def _room_agent(self, room_id: str, hears: MediaStreamTrack, publish: Any) -> CallAgent:
        assert self.ai is not None
        return CallAgent(self.ai, f"room:{room_id}", hears, publish=publish)

    def _on_agent_event(self, call: Call, event: object) -> None:
        self.bus.publish(event)
        if isinstance(event, HandoffRequested):
            call.log.info("handoff_requested", reason=event.reason, detail=event.detail)
            if self.config.sip.transfer_target and call.state is CallState.AI_ACTIVE:
                try:
                    self._transfer(call, None)
                except ValueError as exc:
                    call.log.warning("handoff_failed", error=str(exc))

    async def _sweep_rooms(self) -> None:
        while True:
            await asyncio.sleep(5.0)
            try:
                await self.rooms.sweep()
            except Exception:
                log.exception("room_sweep_failed")

    # --- the HTTP control surface (kefu.signaling.http.Control) --------------------------------

    def ready(self) -> tuple[bool, dict[str, Any]]:
        detail: dict[str, Any] = {
            "draining": self.draining,
            "active_calls": len(self.calls),
            "max_calls": self.config.calls.max_concurrent,
            "rtp_ports_free": self.ports.capacity - self.ports.in_use,
            "media_mode": self.config.calls.media_mode,
        }
        listening = self.worker is not None or self.sip_address is not None
        ok = not self.draining and listening and not self.ai_loading
        if self.room_workers is not None:
            detail["room_workers"] = self.room_workers.describe()
            ok = ok and self.room_workers.all_ready
        if self.ai_loading:
            detail["ai"] = "loading"
        if self.ai is not None:
            detail["ai"] = self.ai.readiness()
            # A broken model does not stop kefu: calls get an apology and a transfer.
            detail["ai_ready"] = self.ai.ready
        return ok, detail

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def _http_app(self) -> web.Application:
        """/healthz, /metrics, /api/* (tokens checked as the signaling does), GET /api/events."""
        allow = TransferAllowList(
            self.config.calls.transfer_allow, default=self.config.sip.transfer_target
        )
        app = build_app(self, auth=self.signaling.auth, transfer_allow=allow)
        add_event_routes(app, self.bus, event_json, self.signaling.auth)
        return app

    def _sfu_stats(self) -> dict[str, int]:
        stats = self.rooms.sfu.stats()
        if self.room_workers is not None:
            for name, value in self.room_workers.sfu_stats().items():
                stats[name] = stats.get(name, 0) + value
        return stats

    def list_calls(self) -> list[dict[str, Any]]:
        return [call.summary() for call in self.calls.values()]

    def _by_id(self, call_id: str) -> Call:
        for call in self.calls.values():
            if call.id == call_id:
                return call
        raise KeyError(call_id)

    def transfer(self, call_id: str, target: str | None) -> None:
        self._transfer(self._by_id(call_id), target)

    def hangup(self, call_id: str) -> None:
        self._hangup(self._by_id(call_id), "api")

    # --- SIP events --------------------------------------------------------------------------

    def _pump(self) -> None:
        """Handle every event the user agent queued; re-entrant calls are folded in."""
        if self._pumping:
            return
        self._pumping = True
        try:
            while (event := self.ua.next_event()) is not None:
                if isinstance(event, sipev.CallConfirmed):
                    self._acked(event.leg)
                try:
                    self._on_sip_event(event)
                except Exception:  # one bad call must not take down the others
                    log.exception("sip_event_failed", sip_event=type(event).__name__)
            self.sip.send_pending()
        finally:
            self._pumping = False

    def _on_sip_event(self, event: sipev.UaEvent) -> None:
        match event:
            case sipev.RequestSeen(method=method):
                # Only methods kefu knows get a series of their own: the name is the sender's.
                label = method if method in KNOWN_METHODS else "other"
                self.metrics.sip_requests.labels(label).inc()
            case sipev.ResponseSent(status=status):
                self.metrics.sip_responses_sent.labels(str(status)).inc()
            case sipev.Dropped(reason=reason):
                self.metrics.sip_dropped.labels(reason).inc()
            case sipev.IncomingCall():
                self._incoming(event)
            case sipev.CallConfirmed(leg=leg):
                if call := self.calls.get(leg):
                    call.log.info("ack_received")
            case sipev.CallCancelled(leg=leg):
                if call := self.calls.get(leg):
                    self._spawn(self._end_call(call, "cancelled", CallInput.HANGUP), "end")
            case sipev.CallEnded(leg=leg, reason=reason):
                if call := self.calls.get(leg):
                    self._spawn(self._end_call(call, reason, CallInput.HANGUP), "end")
            case sipev.ReInvite(leg=leg, offer=offer):
                if call := self.calls.get(leg):
                    self._reinvite(call, offer)
            case sipev.InfoDtmf(leg=leg, digit=digit):
                if call := self.calls.get(leg):
                    self._dtmf(call, digit, "info")
            case sipev.ReferStatus(leg=leg, status=status, final=final):
                if call := self.calls.get(leg):
                    self._refer_status(call, status, final)

    def _acked(self, leg: str) -> None:
        call = self.calls.get(leg)
        if call is not None:
            legs = self._unacked.get(_source_host(call.source))
            if legs is not None:
                legs.discard(leg)

    def _unacked_from(self, host: str) -> set[str]:
        """Legs from ``host`` not yet ACKed, forgetting those that ended meanwhile."""
        legs = self._unacked.get(host)
        if legs is None:
            return set()
        legs.intersection_update(self.calls)
        if not legs:
            del self._unacked[host]
        return legs

    def _incoming(self, event: sipev.IncomingCall) -> None:
        limits = self.config.calls
        host = _source_host(event.source)
        if len(self._unacked) > limits.max_concurrent:
            for other in list(self._unacked):  # sources whose calls all ended: forget them
                self._unacked_from(other)
        unacked = self._unacked_from(host)
        cap = limits.max_unacked_per_source
        flooding = 0 < cap <= len(unacked) and not self.sip.gate.exempt(host)
        reason = (
            "draining"
            if self.draining
            else "loading"
            if self.ai_loading
            else "full"
            if len(self.calls) >= limits.max_concurrent
            else "unacked"
            if flooding
            else None
        )
        if reason is not None:
            if flooding:
                # Its next INVITEs are dropped before parsing; one a second gets this far.
                self.sip.hold(host, 1.0)
            self.ua.reject(event.leg, 503, headers=(("Retry-After", str(limits.retry_after)),))
            self.metrics.calls_total.labels(f"rejected_{reason}").inc()
            log.info("call_rejected", reason=reason, source=event.source)
            return
        call = Call(event.leg, self.bus, event.source)
        call.received_monotonic = event.received_at
        self.calls[event.leg] = call
        self._unacked.setdefault(host, set()).add(event.leg)
        self._idle.clear()
        self.metrics.active_calls.set(len(self.calls))
        call.log.info("call_incoming", source=event.source, sip_call_id=event.sip_call_id)
        self.bus.publish(CallStarted(call.id, time.time(), "sip", event.source))
        call.spawn(self._answer(call, event.offer), "answer")

    async def _answer(self, call: Call, offer_bytes: bytes | None) -> None:
        if offer_bytes is None:
            # Delayed offer (RFC 3261 §13.2.1 offer in the 200 OK): not supported yet.
            self._reject(call, 488, "Offer required", warning='399 kefu "no SDP offer"')
            return
        try:
            offer = SessionDescription.parse(offer_bytes)
        except SdpError as exc:
            self._reject(call, 400, "Bad SDP", warning=f'399 kefu "{str(exc)[:100]}"')
            return
        try:
            endpoint = await RtpEndpoint.open(
                self.media_host, self.ports, latching=self.config.rtp.latching, log=call.log
            )
        except (ResourceExhausted, OSError) as exc:
            call.log.warning("no_rtp_port", error=str(exc))
            self._reject(call, 503, None, headers=(("Retry-After", "5"),))
            return
        call.endpoint = endpoint
        if self.config.calls.ring_seconds > 0:
            self.ua.ring(call.leg, time.monotonic())
            self.sip.flush()
            await asyncio.sleep(self.config.calls.ring_seconds)
        try:
            negotiated = answer_offer(
                offer,
                local_address=self.media_host,
                local_port=endpoint.local_port,
                preferences=self.config.rtp.codecs,
                honour_offer_order=self.config.rtp.honour_offer_order,
                session_id=secrets.randbits(48),
                session_version=1,
            )
        except SdpError as exc:
            self._reject(call, 488, None, warning=warning_for(exc))
            return
        if call.state is not CallState.RINGING or call.leg not in self.calls:
            return  # cancelled while we bound ports
        call.negotiated = negotiated
        self._start_media(call)
        if self.config.calls.sip_room:
            try:
                await self._join_room(call, self.config.calls.sip_room)
            except Exception as exc:  # room full, node full: the caller hears why
                call.log.warning("sip_room_join_failed", error=str(exc))
                self._reject(call, 503, None, headers=(("Retry-After", "10"),))
                return
            if call.state is not CallState.RINGING or call.leg not in self.calls:
                return
        self.ua.answer(call.leg, bytes(negotiated.answer), time.monotonic())
        self.metrics.invite_to_answer.observe(time.monotonic() - call.received_monotonic)
        call.apply(CallInput.ANSWER, "answered")
        call.spawn(self._watch_dtmf(call), "dtmf")
        if self.config.calls.max_call_seconds > 0:
            call.spawn(self._limit_duration(call), "limit")
        self.sip.flush()

    def _reject(
        self,
        call: Call,
        status: int,
        reason: str | None,
        *,
        warning: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        if warning:
            headers = (*headers, ("Warning", warning))
        call.log.info("call_rejected", status=status, warning=warning)
        self.ua.reject(call.leg, status, reason, headers=headers)
        self.metrics.calls_total.labels(f"rejected_{status}").inc()
        self._spawn(self._end_call(call, f"rejected {status}", CallInput.HANGUP, counted=True), "e")
        self.sip.flush()

    def _start_media(self, call: Call) -> None:
        n, ep = call.negotiated, call.endpoint
        assert n is not None and ep is not None
        ep.start(
            (n.remote_address, n.remote_port),
            codec_info(n.codec),
            n.payload_type,
            n.dtmf_payload_type,
            n.ptime,
            (n.remote_address, n.remote_rtcp_port),
            direction=n.direction,
        )
        mode = self.config.calls.media_mode
        if self.config.calls.sip_room:
            return  # the room's mix is played once the call has joined it
        if mode == "prompt":
            pcm = self._prompt if self._prompt is not None else chime()
            ep.play(PromptThenEcho(PcmTrack(pcm), ep.inbound))
        elif mode == "ai" and self.ai is not None:
            agent = CallAgent(
                self.ai, call.id, ep.inbound, publish=lambda e: self._on_agent_event(call, e)
            )
            call.agent = agent
            ep.play(agent.outbound)
            call.spawn(agent.start(), "agent-start")
        else:
            ep.reflect()

    async def _join_room(self, call: Call, room_id: str) -> None:
        ep = call.endpoint
        assert ep is not None
        participant = await self.rooms.join_sip(room_id, call.id, ep.inbound)
        call.room = participant
        ep.play(participant.mixed_audio)
        call.log.info("sip_joined_room", room=room_id)

    def _reinvite(self, call: Call, offer_bytes: bytes | None) -> None:
        ep, previous = call.endpoint, call.negotiated
        if ep is None or previous is None:
            self.ua.reject_reinvite(call.leg, 491)
            return
        if offer_bytes is None:
            # An offerless re-INVITE asks for our current description (RFC 3264 §8).
            self.ua.answer_reinvite(call.leg, bytes(previous.local_sdp), time.monotonic())
            return
        try:
            offer = SessionDescription.parse(offer_bytes)
            negotiated = answer_offer(
                offer,
                local_address=self.media_host,
                local_port=ep.local_port,
                preferences=self.config.rtp.codecs,
                honour_offer_order=self.config.rtp.honour_offer_order,
                previous=previous,
            )
        except SdpError as exc:
            self.ua.reject_reinvite(call.leg, 488, headers=(("Warning", warning_for(exc)),))
            return
        call.negotiated = negotiated
        ep.update(
            remote=(negotiated.remote_address, negotiated.remote_port),
            remote_rtcp=(negotiated.remote_address, negotiated.remote_rtcp_port),
            codec=codec_info(negotiated.codec),
            payload_type=negotiated.payload_type,
            dtmf_payload_type=negotiated.dtmf_payload_type,
            direction=negotiated.direction,
        )
        call.log.info("reinvite", codec=negotiated.codec, direction=negotiated.direction)
        self.ua.answer_reinvite(call.leg, bytes(negotiated.answer), time.monotonic())

    async def _watch_dtmf(self, call: Call) -> None:
        assert call.endpoint is not None
        while True:
            event = await call.endpoint.dtmf.get()
            self._dtmf(call, event.digit, "rfc4733")

    def _dtmf(self, call: Call, digit: str, source: str) -> None:
        self.metrics.dtmf.labels(source).inc()
        call.log.info("dtmf", digit=digit, source=source)
        self.bus.publish(DtmfReceived(call.id, time.time(), digit, source))
        if digit == self.config.sip.transfer_digit and self.config.sip.transfer_target:
            if call.state in (CallState.AI_ACTIVE, CallState.HUMAN_ACTIVE):
                self._transfer(call, None)

    def _transfer(self, call: Call, target: str | None) -> None:
        target = target or self.config.sip.transfer_target
        if not target:
            raise ValueError("no transfer target given or configured (sip.transfer_target)")
        if call.state not in (CallState.AI_ACTIVE, CallState.HUMAN_ACTIVE):
            raise ValueError(f"call is {call.state.value}")
        target = transfer_target(target)
        # The state changes only once the REFER is on its way: a refused one changes nothing.
        self.ua.refer(call.leg, target, time.monotonic())
        call.transfer_target = target
        call.apply(CallInput.TRANSFER, f"REFER to {target}")
        self.sip.flush()

    def _refer_status(self, call: Call, status: int, final: bool) -> None:
        target = call.transfer_target or ""
        self.bus.publish(TransferProgress(call.id, time.time(), target, status))
        call.log.info("transfer_progress", status=status, final=final)
        if not final or call.state is not CallState.TRANSFERRING:
            return
        if 200 <= status < 300:
            self._spawn(self._end_call(call, "transferred", CallInput.TRANSFER_DONE), "end")
            self.ua.hangup(call.leg, time.monotonic())
        else:
            call.apply(CallInput.TRANSFER_FAILED_AI, f"transfer failed: {status}")

    async def _limit_duration(self, call: Call) -> None:
        await asyncio.sleep(self.config.calls.max_call_seconds)
        self._hangup(call, "max_call_seconds")

    def _hangup(self, call: Call, reason: str) -> None:
        self.ua.hangup(call.leg, time.monotonic())
        self._spawn(self._end_call(call, reason, CallInput.HANGUP), "end")
        self.sip.flush()

    async def _end_call(
        self, call: Call, reason: str, event: CallInput, *, counted: bool = False
    ) -> None:
        if self.calls.get(call.leg) is not call:
            return
        del self.calls[call.leg]
        if call.state is not CallState.ENDED:
            call.apply(event, reason)
        call.end_reason = reason
        current = asyncio.current_task()
        for task in list(call.tasks):
            if task is not current:
                task.cancel()
        if call.agent is not None:
            await _release(call, "agent", call.agent.close)
        if call.room is not None:
            await _release(call, "room", call.room.leave)
        ep = call.endpoint
        if ep is not None:
            stats = ep.stats
            self.metrics.rtp_packets.labels("in").inc(stats.packets_received)
            self.metrics.rtp_packets.labels("out").inc(stats.packets_sent)
            self.metrics.rtp_dropped.labels("unlatched").inc(stats.dropped_unlatched)
            self.metrics.rtp_dropped.labels("malformed").inc(stats.dropped_malformed)
            self.metrics.rtp_lost.inc(max(0, stats.packets_lost))
            if stats.packets_received:
                self.metrics.rtp_jitter.observe(stats.jitter_ms / 1000)
            await _release(call, "rtp", ep.close)
        if not counted:
            result = "completed" if call.answered else reason.split()[0]
            self.metrics.calls_total.labels(result).inc()
        self.metrics.active_calls.set(len(self.calls))
        call.log.info("call_ended", reason=reason)
        self.bus.publish(CallEnded(call.id, time.time(), reason, call.answered is not None))
        if not self.calls:
            self._idle.set()


async def _release(call: Call, what: str, close: Callable[[], Awaitable[object]]) -> None:
    """Run one teardown step; a failure is logged with the call and never stops the others."""
    try:
        await close()
    except asyncio.CancelledError:
        raise
    except Exception:
        call.log.exception("call_teardown_failed", part=what)


def transfer_target(text: str) -> str:
    """``text`` as a REFER target: one SIP/SIPS/tel URI on one line, or ValueError."""
    if any(ch in text for ch in "\r\n\0<>") or text != text.strip():
        raise ValueError("transfer target must be a single URI without control characters")
    try:
        uri = SipUri.parse(text)
    except ValueError as exc:
        raise ValueError(f"transfer target is not a URI: {exc}") from None
    if uri.scheme not in ("sip", "sips", "tel"):
        raise ValueError(f"transfer target scheme {uri.scheme!r} is not sip, sips or tel")
    return text


def _source_host(source: str) -> str:
    """The IP of a ``transport:host:port`` source (:class:`~kefu.sip.ua_events.Peer`)."""
    return source.partition(":")[2].rpartition(":")[0].strip("[]")


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
        server._spawn(_stop_when_orphaned(worker.front_pid, stop), "front-watch")
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


async def _stop_when_orphaned(front_pid: int, stop: asyncio.Event) -> None:
    """A room worker whose front died (SIGKILL, crash) stops instead of serving nobody."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(front_pid)
    except ProcessLookupError:
        fd = -1
    if fd >= 0:
        try:
            await wait_exited(loop, fd)
        finally:
            os.close(fd)
    log.warning("room_worker_orphaned", front_pid=front_pid)
    stop.set()

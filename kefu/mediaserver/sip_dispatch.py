"""SIP dispatch: the trunk's transport, its user agent's events, and admission of new calls.

The user agent is sans-IO; the transport calls :meth:`SipDispatch.pump` whenever it fed it
bytes or a timer fired, and every queued event is routed here: metrics for requests,
responses and drops; new calls (admitted or refused 503, see :meth:`SipDispatch._incoming`);
ACK, CANCEL, BYE, re-INVITE, INFO DTMF and REFER progress for the calls already live.
Admission is layered: the transport's per-source token bucket and TCP caps drop floods before
parsing (:mod:`kefu.sip.admission`); here a new call is refused while draining, while the AI
loads, when ``calls.max_concurrent`` are live, or when its source has
``calls.max_unacked_per_source`` calls answered and never ACKed (that source is then held).
"""

from __future__ import annotations

import asyncio
import time

import structlog

from kefu.ai_bridge.listen.asr.language import LANGUAGE_HEADER, call_language
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallInput, CallState
from kefu.mediaserver.calls import CallLifecycle
from kefu.mediaserver.config import Config
from kefu.mediaserver.events import CallStarted, DtmfReceived, TransferProgress
from kefu.mediaserver.media_modes import MediaModes
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.outbound import Dialer
from kefu.mediaserver.sip_leg import SipAnswerer, SipLeg
from kefu.rtp.ports import PortAllocator
from kefu.sip import ua as sipua
from kefu.sip import ua_events as sipev
from kefu.sip.admission import AdmissionLimits
from kefu.sip.aio import SipTransport, TcpLimits
from kefu.sip.ua_leg import KNOWN_METHODS
from kefu.sip.uri import SipUri

log = structlog.get_logger("kefu.server")


class SipDispatch:
    """Owns the SIP user agent and transport; turns their events into call operations."""

    def __init__(
        self,
        config: Config,
        *,
        metrics: Metrics,
        bus: EventBus,
        ports: PortAllocator,
        lifecycle: CallLifecycle,
        media: MediaModes,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.bus = bus
        self.lifecycle = lifecycle
        self.media = media
        self.draining = False
        """Refuse new calls (503): set by the server's drain."""
        self.ua = sipua.UserAgent(sipua.UaSettings.from_config(config))
        sip = config.sip
        self.sip = SipTransport(
            self.ua,
            self.pump,
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
            in_use=lifecycle.has_source,
        )
        self.answerer = SipAnswerer(config, self.ua, self.sip, ports, metrics, lifecycle, media)
        self.dialer = Dialer(
            config,
            self.ua,
            self.sip,
            ports=ports,
            metrics=metrics,
            bus=bus,
            lifecycle=lifecycle,
            media=media,
            draining=lambda: self.draining,
            on_answered=self._running,
        )
        """Outbound calls (POST /api/calls): kefu.mediaserver.outbound."""
        self._unacked: dict[str, set[str]] = {}
        """Source IP -> legs accepted from it and not yet ACKed (calls.max_unacked_per_source)."""
        self._pumping = False

    @property
    def calls(self) -> dict[str, Call]:
        return self.lifecycle.calls

    # --- the user agent's events -------------------------------------------------------------

    def pump(self) -> None:
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
            case sipev.CallConfirmed(leg=leg, negotiated=negotiated):
                if call := self.calls.get(leg):
                    call.log.info("ack_received")
                    if negotiated is not None:  # the ACK answered our offer (delayed offer)
                        self.answerer.ack_answered(call, negotiated)
            case sipev.CallCancelled(leg=leg):
                if call := self.calls.get(leg):
                    self.lifecycle.end_soon(call, "cancelled")
            case sipev.CallEnded(leg=leg, reason=reason):
                if call := self.calls.get(leg):
                    self.lifecycle.end_soon(call, reason)
            case sipev.ReInvite(leg=leg, offer=offer):
                if call := self.calls.get(leg):
                    self.answerer.reinvite(call, offer)
            case sipev.InfoDtmf(leg=leg, digit=digit):
                if call := self.calls.get(leg):
                    self._dtmf(call, digit, "info")
            case sipev.ReferStatus(leg=leg, status=status, final=final):
                if call := self.calls.get(leg):
                    self._refer_status(call, status, final)
            case sipev.OutboundProgress():
                self.dialer.progress(event)
            case sipev.OutboundRetried():
                self.dialer.retried(event)
            case sipev.OutboundAnswered():
                self.dialer.answered(event)
            case sipev.OutboundFailed():
                self.dialer.failed(event)

    # --- admission ---------------------------------------------------------------------------

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
            if self.media.ai_loading
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
        ai = self.config.ai
        call = Call(
            event.leg,
            self.bus,
            event.source,
            caller_uri=str(event.invite.from_.uri),
            caller=SipLeg(self.ua, event.leg, self.sip),
            language=call_language(
                ai.language,
                header=event.invite.headers.get(LANGUAGE_HEADER),
                called=event.invite.uri.user or "",
                source_host=host,
                by_number=ai.language_by_number,
                by_trunk=ai.language_by_trunk,
            ),
            trunk_host=host,
        )
        call.received_monotonic = event.received_at
        self.lifecycle.add(call)
        self._unacked.setdefault(host, set()).add(event.leg)
        call.log.info(
            "call_incoming",
            source=event.source,
            sip_call_id=event.sip_call_id,
            language=call.language,
        )
        self.bus.publish(CallStarted(call.id, time.time(), "sip", event.source))
        call.spawn(self._answer(call, event.offer), "answer")

    async def _answer(self, call: Call, offer: bytes | None) -> None:
        if await self.answerer.answer(call, offer):
            self._running(call)

    def _running(self, call: Call) -> None:
        """An answered call's media runs (incoming or outbound): DTMF, the duration cap."""
        call.spawn(self._watch_dtmf(call), "dtmf")
        if self.config.calls.max_call_seconds > 0:
            call.spawn(self._limit_duration(call), "limit")

    async def _limit_duration(self, call: Call) -> None:
        await asyncio.sleep(self.config.calls.max_call_seconds)
        self.lifecycle.hangup(call, "max_call_seconds")

    # --- DTMF and transfers ------------------------------------------------------------------

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
                self.transfer(call, None)

    def handoff(self, call: Call) -> None:
        """The AI asked for a human: transfer to ``sip.transfer_target`` if there is one."""
        if self.config.sip.transfer_target and call.state is CallState.AI_ACTIVE:
            try:
                self.transfer(call, None)
            except ValueError as exc:
                call.log.warning("handoff_failed", error=str(exc))

    def transfer(self, call: Call, target: str | None) -> None:
        """REFER ``call`` to ``target`` (default ``sip.transfer_target``).

        ValueError for a missing or malformed target, CallStateConflict when the call is not
        ``ai_active`` or ``human_active``; either way nothing is sent and nothing changes.
        """
        target = target or self.config.sip.transfer_target
        if not target:
            raise ValueError("no transfer target given or configured (sip.transfer_target)")
        call.require(CallInput.TRANSFER, "transfer")
        # The state changes only once the REFER is on its way: a refused one changes nothing.
        call.transfer(transfer_target(target))

    def _refer_status(self, call: Call, status: int, final: bool) -> None:
        target = call.transfer_target or ""
        self.bus.publish(TransferProgress(call.id, time.time(), target, status))
        call.log.info("transfer_progress", status=status, final=final)
        if not final or call.state is not CallState.TRANSFERRING:
            return
        if 200 <= status < 300:
            self.lifecycle.end_soon(call, "transferred", CallInput.TRANSFER_DONE)
            self.ua.hangup(call.leg, time.monotonic())
        else:
            call.transfer_failed(status)


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

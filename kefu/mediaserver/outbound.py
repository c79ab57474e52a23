"""Outbound calls: kefu dials through the trunk and runs a media mode once answered.

``POST /api/calls`` (and ``kefu call``) ends up in :meth:`Dialer.place`: it binds the call's
RTP ports, offers every configured codec, and has the user agent send the INVITE
(:mod:`kefu.sip.ua_uac`: outbound proxy, digest answer, redirects, CANCEL on the ring
timeout). The call is a :class:`~kefu.mediaserver.call.Call` like an incoming one
(``direction = "outbound"``), ``ringing`` until answered; the user agent's outbound events
come back here through :class:`~kefu.mediaserver.sip_dispatch.SipDispatch`:

* ``OutboundProgress`` → ``call.ringing`` (``early_media`` when the 1xx had SDP);
* ``OutboundAnswered`` → the answer is read against our offer, the media mode starts
  exactly as for an answered incoming call (:meth:`MediaModes.start`), the call goes to
  ``ai_active``, ``call.answered`` — or, when the answer is unusable, BYE;
* ``OutboundFailed`` → ``call.failed`` with the SIP status, then the call ends.

From there on BYE, hang-up, transfer, takeover, DTMF and recordings are the incoming path's.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import structlog

from kefu.errors import ResourceExhausted, SdpError
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallInput, CallState
from kefu.mediaserver.calls import CallLifecycle
from kefu.mediaserver.config import Config
from kefu.mediaserver.events import (
    CallAnswered,
    CallDialing,
    CallFailed,
    CallRinging,
    CallStarted,
)
from kefu.mediaserver.media_modes import MediaModes
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.sip_leg import SipLeg
from kefu.mediaserver.trunk_config import proxy_address
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.ports import PortAllocator
from kefu.signaling.dial_request import DialRequest
from kefu.sip import ua as sipua
from kefu.sip import ua_events as sipev
from kefu.sip.aio import SipTransport
from kefu.sip.offer import accept_answer, make_offer
from kefu.sip.sdes import new_offer_keys as new_srtp_keys
from kefu.sip.sdp import SessionDescription
from kefu.sip.ua_events import Peer
from kefu.sip.uac import DialSpec
from kefu.sip.uri import SipUri

log = structlog.get_logger("kefu.outbound")

OUTBOUND_KIND = "sip_outbound"
"""``call.started``'s ``kind`` for a call kefu placed."""


class Dialer:
    """Places outbound calls and follows them until answered or failed."""

    def __init__(
        self,
        config: Config,
        ua: sipua.UserAgent,
        sip: SipTransport,
        *,
        ports: PortAllocator,
        metrics: Metrics,
        bus: EventBus,
        lifecycle: CallLifecycle,
        media: MediaModes,
        draining: Callable[[], bool],
        on_answered: Callable[[Call], None],
    ) -> None:
        self.config = config
        self.ua = ua
        self.sip = sip
        self.ports = ports
        self.metrics = metrics
        self.bus = bus
        self.lifecycle = lifecycle
        self.media = media
        self.draining = draining
        self.on_answered = on_answered
        """Runs once an answered call's media started (DTMF watch, duration limit)."""
        proxy = proxy_address(config.trunk.outbound_proxy)
        self.proxy = Peer("udp", *proxy) if proxy is not None else None
        self._offers: dict[str, SessionDescription] = {}
        """Leg -> the offer its INVITE carried, until answered or failed (every outbound
        leg ends in one of the two: a hang-up before the answer sends CANCEL, whose 487 or
        408 is a failure)."""

    @property
    def media_host(self) -> str:
        return self.config.sip.public_address or self.config.sip.listen.host

    def from_uri(self, sender: str | None) -> str:
        """kefu's From for a call: the request's SIP URI, or a user at ``trunk.from_domain``."""
        trunk = self.config.trunk
        if sender is not None and ":" in sender:
            uri = sender
        else:
            domain = trunk.from_domain or self.media_host
            if ":" in domain and not domain.startswith("["):
                domain = f"[{domain}]"
            uri = f"sip:{sender or trunk.from_user}@{domain}"
        name = f'"{trunk.display_name}" ' if trunk.display_name else ""
        return f"{name}<{uri}>"

    def _refusal(self, mode: str) -> str | None:
        if self.draining():
            return "draining: not placing new calls"
        if len(self.lifecycle.calls) >= self.config.calls.max_concurrent:
            return f"calls.max_concurrent ({self.config.calls.max_concurrent}) calls are live"
        if mode == "ai" and self.media.ai is None:
            return "the AI is not loaded (still loading, or this server runs without it)"
        return None

    async def place(self, request: DialRequest, who: str) -> Call:
        """Dial ``request``; the new call (``ringing``). ResourceExhausted when kefu cannot
        take a call now (503), ValueError when the target cannot be routed (400)."""
        mode = request.media_mode or self.config.calls.media_mode
        refused = self._refusal(mode)
        if refused is not None:
            raise ResourceExhausted(refused)
        try:
            endpoint = await RtpEndpoint.open(
                self.media_host, self.ports, latching=self.config.rtp.latching, log=log
            )
        except OSError as exc:
            raise ResourceExhausted(f"no RTP port: {exc}") from None
        offer = make_offer(
            local_address=self.media_host,
            local_port=endpoint.local_port,
            codecs=self.config.rtp.codecs,
            session_id=secrets.randbits(48),
            session_version=1,
            # rtp.srtp = "required": an RTP/SAVP offer with SDES keys (the answer's keys are
            # read by accept_answer; media_modes starts SRTP from Negotiated.srtp).
            srtp_keys=new_srtp_keys() if self.config.rtp.srtp == "required" else (),
        )
        trunk = self.config.trunk
        from_uri = self.from_uri(request.from_)
        spec = DialSpec(
            target=request.to,
            from_uri=from_uri,
            sdp=bytes(offer),
            outbound_proxy=self.proxy,
            username=trunk.username,
            password=trunk.password,
            ring_timeout=trunk.ring_timeout,
            max_redirects=trunk.max_redirects,
        )
        try:
            leg = self.ua.dial(spec, time.monotonic())
        except ValueError:
            await endpoint.close()
            raise
        call = Call(
            leg,
            self.bus,
            str(self.proxy or request.to),
            caller_uri=from_uri,
            caller=SipLeg(self.ua, leg, self.sip),
            language=_language(request.context, self.config.ai.language),
            direction="outbound",
            callee_uri=request.to,
            media_mode=mode,
            context=dict(request.context),
            trunk_host=self.proxy.host if self.proxy else SipUri.parse(request.to).host,
        )
        call.endpoint = endpoint
        self._offers[leg] = offer
        self.lifecycle.add(call)
        now = time.time()
        self.bus.publish(CallStarted(call.id, now, OUTBOUND_KIND, request.to))
        self.bus.publish(CallDialing(call.id, now, request.to, from_uri, mode, call.context, who))
        call.log.info("outbound_dialing", to=request.to, media_mode=mode, by=who)
        self.sip.flush()
        return call

    # --- the user agent's outbound events -----------------------------------------------------

    def progress(self, event: sipev.OutboundProgress) -> None:
        call = self.lifecycle.calls.get(event.leg)
        if call is None:
            return
        early = event.sdp is not None
        call.log.info("outbound_ringing", status=event.status, early_media=early)
        self.bus.publish(CallRinging(call.id, time.time(), event.status, event.reason, early))

    def retried(self, event: sipev.OutboundRetried) -> None:
        if call := self.lifecycle.calls.get(event.leg):
            call.log.info(
                "outbound_retried", cause=event.cause, status=event.status, target=event.target
            )

    def answered(self, event: sipev.OutboundAnswered) -> None:
        offer = self._offers.pop(event.leg, None)
        call = self.lifecycle.calls.get(event.leg)
        if call is None or offer is None or call.state is not CallState.RINGING:
            return
        try:
            if event.sdp is None:
                raise SdpError("the 2xx carried no SDP answer")
            negotiated = accept_answer(offer, SessionDescription.parse(event.sdp))
        except SdpError as exc:
            call.log.warning("outbound_bad_answer", error=str(exc))
            self.metrics.outbound_calls.labels("bad_answer").inc()
            self.lifecycle.hangup(call, f"bad_answer ({exc})")
            return
        call.negotiated = negotiated
        try:
            self.media.start(call)
        except Exception:  # the callee hears of it only by our BYE
            call.log.exception("media_start_failed")
            self.lifecycle.hangup(call, "media_start_failed")
            return
        setup_ms = round(event.setup_seconds * 1000, 1)
        self.metrics.outbound_setup.observe(event.setup_seconds)
        self.metrics.outbound_calls.labels("answered").inc()
        call.apply(CallInput.ANSWER, "answered")
        call.log.info("outbound_answered", setup_ms=setup_ms, codec=negotiated.codec)
        self.bus.publish(CallAnswered(call.id, time.time(), setup_ms, negotiated.codec))
        self.on_answered(call)

    def failed(self, event: sipev.OutboundFailed) -> None:
        self._offers.pop(event.leg, None)
        call = self.lifecycle.calls.get(event.leg)
        if call is None:
            return
        self.metrics.outbound_calls.labels("failed").inc()
        call.log.info("outbound_failed", status=event.status, reason=event.reason)
        self.bus.publish(CallFailed(call.id, time.time(), event.status, event.reason))
        self.lifecycle.end_soon(call, f"failed {event.status}")


def _language(context: dict[str, object], default: str) -> str:
    """``context.language`` (``en``, ``zh``, ``auto``) when given, else ``ai.language``."""
    lang = context.get("language")
    return lang if lang in ("en", "zh", "auto") else default

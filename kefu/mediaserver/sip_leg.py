"""A call's SIP leg: answering its INVITE (SDP offer/answer, RTP endpoint), re-INVITEs,
rejections, and the :class:`~kefu.mediaserver.call.Leg` operations (REFER, BYE).

An INVITE without SDP (delayed offer, RFC 3261 §13.2.1) is answered with kefu's own offer
(every configured codec and telephone-event, on the call's RTP port); the call stays
``ringing`` until the ACK's answer is accepted (:meth:`SipAnswerer.ack_answered`), and then
starts its media like any other. An ACK without a usable answer makes the user agent send
BYE and report ``CallEnded``, which ends the call and frees its port. Offerless re-INVITEs
are answered the same way.

The user agent is sans-IO: every method here queues messages on it and flushes the transport.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from kefu.codecs.info import codec_info
from kefu.errors import ResourceExhausted, SdpError
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallInput, CallState
from kefu.mediaserver.calls import CallLifecycle
from kefu.mediaserver.config import Config
from kefu.mediaserver.media_modes import MediaModes
from kefu.mediaserver.metrics import Metrics
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.ports import PortAllocator
from kefu.sip import sdes
from kefu.sip import ua as sipua
from kefu.sip.aio import SipTransport
from kefu.sip.offer import continue_origin, make_offer
from kefu.sip.offer_answer import Negotiated, answer_offer, warning_for
from kefu.sip.sdp import SessionDescription


@dataclass(eq=False)
class SipLeg:
    """The caller's SIP dialog as the call controller acts on it."""

    ua: sipua.UserAgent
    handle: str
    """The user agent's handle for the dialog."""
    sip: SipTransport

    def refer(self, target: str) -> None:
        self.ua.refer(self.handle, target, time.monotonic())
        self.sip.flush()

    def hangup(self) -> None:
        self.ua.hangup(self.handle, time.monotonic())
        self.sip.flush()


class SipAnswerer:
    """Answers (or rejects) a new call's INVITE and its re-INVITEs."""

    def __init__(
        self,
        config: Config,
        ua: sipua.UserAgent,
        sip: SipTransport,
        ports: PortAllocator,
        metrics: Metrics,
        lifecycle: CallLifecycle,
        media: MediaModes,
    ) -> None:
        self.config = config
        self.ua = ua
        self.sip = sip
        self.ports = ports
        self.metrics = metrics
        self.lifecycle = lifecycle
        self.media = media

    @property
    def media_host(self) -> str:
        return self.config.sip.public_address or self.config.sip.listen.host

    def _live(self, call: Call) -> bool:
        """Still ringing and still ours (not cancelled while we were waiting)."""
        return call.state is CallState.RINGING and call.leg in self.lifecycle.calls

    async def answer(self, call: Call, offer_bytes: bytes | None) -> bool:
        """Bind RTP ports, ring, negotiate, start the media, then 200 OK (``ai_active``);
        False if the call was rejected or went away meanwhile. Without an offer: 200 OK
        with ours, the media waits for the ACK (:meth:`ack_answered`)."""
        if offer_bytes is None:
            return await self._offer(call)
        try:
            offer = SessionDescription.parse(offer_bytes)
        except SdpError as exc:
            self.reject(call, 400, "Bad SDP", warning=f'399 kefu "{str(exc)[:100]}"')
            return False
        endpoint = await self._open_and_ring(call)
        if endpoint is None:
            return False
        try:
            negotiated = answer_offer(
                offer,
                local_address=self.media_host,
                local_port=endpoint.local_port,
                preferences=self.config.rtp.codecs,
                honour_offer_order=self.config.rtp.honour_offer_order,
                session_id=secrets.randbits(48),
                session_version=1,
                srtp=self.config.rtp.srtp,
            )
        except SdpError as exc:
            self.reject(call, 488, None, warning=warning_for(exc))
            return False
        if not self._live(call):
            return False  # cancelled while we bound ports
        call.negotiated = negotiated
        self.media.start(call)
        if self.config.calls.sip_room:
            try:
                await self.media.join_room(call, self.config.calls.sip_room)
            except Exception as exc:  # room full, node full: the caller hears why
                call.log.warning("sip_room_join_failed", error=str(exc))
                self.reject(call, 503, None, headers=(("Retry-After", "10"),))
                return False
            if not self._live(call):
                return False
        self.ua.answer(call.leg, bytes(negotiated.answer), time.monotonic())
        self.metrics.invite_to_answer.observe(time.monotonic() - call.received_monotonic)
        call.apply(CallInput.ANSWER, "answered")
        self.sip.flush()
        return True

    async def _open_and_ring(self, call: Call) -> RtpEndpoint | None:
        """The call's RTP endpoint (503 and None when no port is free), after ringing."""
        try:
            endpoint = await RtpEndpoint.open(
                self.media_host, self.ports, latching=self.config.rtp.latching, log=call.log
            )
        except (ResourceExhausted, OSError) as exc:
            call.log.warning("no_rtp_port", error=str(exc))
            self.reject(call, 503, None, headers=(("Retry-After", "5"),))
            return None
        call.endpoint = endpoint
        if self.config.calls.ring_seconds > 0:
            self.ua.ring(call.leg, time.monotonic())
            self.sip.flush()
            await asyncio.sleep(self.config.calls.ring_seconds)
        return endpoint

    async def _offer(self, call: Call) -> bool:
        """Delayed offer (RFC 3261 §13.2.1): 200 OK carrying our offer; still ``ringing``."""
        endpoint = await self._open_and_ring(call)
        if endpoint is None or not self._live(call):
            return False
        offer = make_offer(
            local_address=self.media_host,
            local_port=endpoint.local_port,
            codecs=self.config.rtp.codecs,
            session_id=secrets.randbits(48),
            session_version=1,
            srtp_keys=self._offer_keys(None),
        )
        self.ua.answer_with_offer(call.leg, offer, time.monotonic())
        self.metrics.invite_to_answer.observe(time.monotonic() - call.received_monotonic)
        call.log.info("delayed_offer_sent", rtp_port=endpoint.local_port)
        self.sip.flush()
        return True

    def _offer_keys(self, previous: Negotiated | None) -> list[bytes]:
        """SDES keys for kefu's own offer: with ``rtp.srtp = "required"``, or when the call
        already runs SRTP (an offerless re-INVITE must not fall back to plain RTP)."""
        if self.config.rtp.srtp == "required" or (previous is not None and previous.srtp):
            return sdes.new_offer_keys()
        return []

    def ack_answered(self, call: Call, negotiated: Negotiated) -> None:
        """The ACK answered the offer in our 200 OK: start the media (``ai_active``), or
        apply it to the running media after an offerless re-INVITE."""
        if call.negotiated is not None:
            self._update_media(call, negotiated)
            return
        if not self._live(call) or call.endpoint is None:
            return
        call.negotiated = negotiated
        call.log.info(
            "delayed_offer_answered",
            codec=negotiated.codec,
            remote=f"{negotiated.remote_address}:{negotiated.remote_port}",
        )
        try:
            self.media.start(call)
        except Exception:  # after the 200 the caller learns of it only by a BYE
            call.log.exception("media_start_failed")
            self.lifecycle.hangup(call, "media_start_failed")
            return
        if self.config.calls.sip_room:
            call.spawn(self._join_room_then_answer(call, self.config.calls.sip_room), "room")
        else:
            call.apply(CallInput.ANSWER, "answered")

    async def _join_room_then_answer(self, call: Call, room: str) -> None:
        try:
            await self.media.join_room(call, room)
        except Exception as exc:  # room full, node full: after the 200 all we can do is BYE
            call.log.warning("sip_room_join_failed", error=str(exc))
            self.lifecycle.hangup(call, "sip_room_join_failed")
            return
        if self._live(call):
            call.apply(CallInput.ANSWER, "answered")

    def reject(
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
        self.lifecycle.end_soon(call, f"rejected {status}", counted=True)
        self.sip.flush()

    def reinvite(self, call: Call, offer_bytes: bytes | None) -> None:
        ep, previous = call.endpoint, call.negotiated
        if ep is None or previous is None:
            self.ua.reject_reinvite(call.leg, 491)
            return
        if offer_bytes is None:
            # An offerless re-INVITE asks for an offer (RFC 3264 §8): every codec we have,
            # the session's o= line continued; the ACK answers (ack_answered).
            offer = make_offer(
                local_address=self.media_host,
                local_port=ep.local_port,
                codecs=self.config.rtp.codecs,
                session_id=0,
                session_version=0,
                srtp_keys=self._offer_keys(previous),
            )
            offer = continue_origin(offer, previous)
            self.ua.answer_reinvite_with_offer(call.leg, offer, time.monotonic())
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
                srtp=self.config.rtp.srtp,
            )
        except SdpError as exc:
            self.ua.reject_reinvite(call.leg, 488, headers=(("Warning", warning_for(exc)),))
            return
        self._update_media(call, negotiated)
        self.ua.answer_reinvite(call.leg, bytes(negotiated.answer), time.monotonic())

    def _update_media(self, call: Call, negotiated: Negotiated) -> None:
        """Apply a re-INVITE's outcome to the running RTP endpoint."""
        ep = call.endpoint
        assert ep is not None
        call.negotiated = negotiated
        ep.update(
            remote=(negotiated.remote_address, negotiated.remote_port),
            remote_rtcp=(negotiated.remote_address, negotiated.remote_rtcp_port),
            codec=codec_info(negotiated.codec),
            payload_type=negotiated.payload_type,
            dtmf_payload_type=negotiated.dtmf_payload_type,
            direction=negotiated.direction,
            srtp=negotiated.srtp,
        )
        call.log.info("reinvite", codec=negotiated.codec, direction=negotiated.direction)

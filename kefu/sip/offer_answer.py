"""RFC 3264 offer/answer for kefu's one audio stream per call.

kefu is an audio-only media server: of everything offered it accepts exactly one stream, the
first audio ``m=`` line over RTP (``RTP/AVP``, ``RTP/AVPF``) or SDES-SRTP (``RTP/SAVP``,
``RTP/SAVPF`` with a usable ``a=crypto``, RFC 4568, :mod:`kefu.sip.sdes`) that shares a codec
with us, and rejects every other line with port 0, keeping their count and order (RFC 3264 §6).
``srtp`` (config ``rtp.srtp``) says which: ``optional`` answers each offer in its own profile,
``required`` refuses plain RTP and offers only SRTP, ``off`` refuses SRTP.
The answer names a single codec (plus ``telephone-event`` at the codec's clock when offered):
call-center gateways cope badly with answers that leave the codec open, and a single codec
means the RTP layer never has to follow a mid-call payload-type switch.

Everything here is pure and synchronous; the UA owns the SIP side. When an offer cannot be
accepted :class:`NegotiationError` (an :class:`~kefu.errors.SdpError`) carries the RFC 3261
§20.43 warning code; the UA answers ``488 Not Acceptable Here`` with
``Warning: {warning_for(error)}``.

Re-INVITEs (RFC 3264 §8): pass the previous :class:`Negotiated` as ``previous``. Our ``o=``
session id is kept; the version is bumped when the answer changed and kept when it did not
(both are what §8 requires), so session-refresh re-INVITEs get a byte-identical answer.

The offering side (delayed offer, outbound calls, kefu's own re-INVITEs) lives in
:mod:`kefu.sip.offer`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

# The data-only module that kefu.codecs.registry re-exports: the registry itself imports
# numpy and PyAV (~100 ms), which SIP signalling has no use for.
from kefu.codecs.info import CodecInfo, codec_info
from kefu.errors import ConfigError, KefuError, SdpError
from kefu.sip import sdes
from kefu.sip.sdes import CryptoAttribute, SrtpKeys
from kefu.sip.sdp import SessionDescription
from kefu.sip.sdp_fields import (
    DIRECTIONS,
    Attribute,
    Connection,
    Direction,
    MediaDescription,
    Origin,
    RtpMap,
    Timing,
)

DEFAULT_PREFERENCES: tuple[str, ...] = ("opus", "G722", "PCMU", "PCMA")
DEFAULT_PTIME = 20
OPUS_FMTP = "minptime=10;useinbandfec=1"
TELEPHONE_EVENT = "telephone-event"
# DTLS-SRTP (UDP/TLS/RTP/SAVPF) calls come in through the WebRTC stack, not this one.
PLAIN_PROTOS = frozenset({"RTP/AVP", "RTP/AVPF"})
SECURE_PROTOS = frozenset({"RTP/SAVP", "RTP/SAVPF"})
ACCEPTED_PROTOS = PLAIN_PROTOS | SECURE_PROTOS
SrtpPolicy = Literal["optional", "off", "required"]
SRTP_POLICIES: tuple[SrtpPolicy, ...] = ("optional", "off", "required")
"""``rtp.srtp`` values, the default first (see the module docstring)."""
_WARN_TEXT = {
    301: "Incompatible network address formats",
    302: "Incompatible transport protocol",
    304: "Media type not available",
    305: "Incompatible media format",
    399: "Miscellaneous warning",
}


class NegotiationError(SdpError):
    """A well-formed description that cannot be accepted.

    ``warn_code`` is the RFC 3261 §20.43 warning code (301, 302, 304 or 305) and
    ``status`` the response a UAS sends (488, RFC 3261 §21.4.26).
    """

    def __init__(self, warn_code: int, detail: str) -> None:
        super().__init__(f"{_WARN_TEXT.get(warn_code, _WARN_TEXT[399])}: {detail}")
        self.warn_code = warn_code
        self.status = 488


@dataclass(frozen=True, slots=True)
class Negotiated:
    """The outcome of one offer/answer exchange, from kefu's point of view."""

    answer: SessionDescription
    """The answer: ours when kefu answered, the peer's when kefu offered (RFC 3264 §6)."""
    codec: str
    """Canonical encoding name of the one codec in use, e.g. ``PCMU`` (RFC 3551 §6)."""
    payload_type: int
    """RTP payload type for :attr:`codec`; the offerer's number when kefu answers
    (RFC 3264 §6.1), the answerer's when kefu offered."""
    clock_rate: int
    """RTP clock of :attr:`codec` in Hz (RFC 3551 §4.5; 48000 for Opus, RFC 7587 §7)."""
    channels: int
    """SDP channel count of :attr:`codec` (2 for Opus, RFC 7587 §7)."""
    fmtp: str | None
    """The peer's format parameters for :attr:`codec` (RFC 8866 §6.15), e.g. Opus
    ``maxplaybackrate``; these describe what the peer can receive."""
    dtmf_payload_type: int | None
    """``telephone-event`` payload type at the codec's clock, or None (RFC 4733 §7.1.1)."""
    remote_address: str
    """Where to send RTP: the peer's effective ``c=`` address (RFC 8866 §5.7);
    0.0.0.0 means an RFC 2543 hold (RFC 3264 §8.4)."""
    remote_port: int
    """The peer's RTP port from its ``m=`` line (RFC 3264 §5.1)."""
    remote_rtcp_port: int
    """The peer's RTCP port: ``a=rtcp`` (RFC 3605) or RTP port + 1 (RFC 3550 §11)."""
    ptime: int
    """Packetization interval in ms (RFC 8866 §6.4); 20 unless the peer asked otherwise."""
    direction: Direction
    """kefu's own direction for the stream: ``recvonly`` means kefu must not send, e.g.
    while the peer holds the call (RFC 3264 §6.1, §8.4)."""
    media_index: int
    """Index of the accepted ``m=`` line in the offer and answer (RFC 3264 §6)."""
    offer: SessionDescription
    """The offer this exchange answered (RFC 3264 §5)."""
    local_is_offerer: bool = False
    """True when kefu wrote the offer (outbound call, kefu's own re-INVITE)."""
    srtp: SrtpKeys | None = None
    """SDES-SRTP keys when the stream is ``RTP/SAVP`` (RFC 4568 §7), None for plain RTP."""

    @property
    def local_sdp(self) -> SessionDescription:
        """The description kefu sent; its ``o=`` line continues in the next exchange."""
        return self.offer if self.local_is_offerer else self.answer

    @property
    def remote_sdp(self) -> SessionDescription:
        return self.answer if self.local_is_offerer else self.offer

    @property
    def sending(self) -> bool:
        return self.direction in ("sendrecv", "sendonly")

    @property
    def receiving(self) -> bool:
        return self.direction in ("sendrecv", "recvonly")


def warning_for(error: SdpError, *, agent: str = "kefu") -> str:
    """The value of a ``Warning`` header for a 488 answer (RFC 3261 §20.43).

    Parse errors (anything but :class:`NegotiationError`) get code 399.
    """
    code = error.warn_code if isinstance(error, NegotiationError) else 399
    text = str(error) if isinstance(error, NegotiationError) else f"Bad SDP: {error}"
    # warn-text is a quoted-string: no controls, escape quote and backslash, keep it short.
    text = "".join(ch if ch.isprintable() else " " for ch in text[:200])
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'{code} {agent} "{text}"'


# --- direction algebra (RFC 3264 §6.1) ---------------------------------------------------


def _can(direction: Direction) -> tuple[bool, bool]:
    """(sends, receives) for a direction as written by whoever wrote it."""
    return direction in ("sendrecv", "sendonly"), direction in ("sendrecv", "recvonly")


def _direction(sends: bool, receives: bool) -> Direction:
    return DIRECTIONS[(0 if receives else 1) if sends else (2 if receives else 3)]


def _our_direction(theirs: Direction, ours_at_most: Direction) -> Direction:
    """We send only if they receive and we may send; we receive only if they send."""
    they_send, they_receive = _can(theirs)
    we_may_send, we_may_receive = _can(ours_at_most)
    return _direction(they_receive and we_may_send, they_send and we_may_receive)


# --- shared helpers ----------------------------------------------------------------------


def _addr_type(local_address: str) -> str:
    try:
        return "IP6" if ipaddress.ip_address(local_address).version == 6 else "IP4"
    except ValueError:
        raise ConfigError(
            f"local media address {local_address!r} is not an IP literal", key="local_address"
        ) from None


def _check_port(local_port: int) -> None:
    if not 0 < local_port <= 65535:
        raise ConfigError(f"local RTP port {local_port} out of range", key="local_port")


def _codec_infos(names: Sequence[str], key: str) -> tuple[CodecInfo, ...]:
    infos: list[CodecInfo] = []
    for name in names:
        try:
            info = codec_info(name)
        except KefuError:
            raise ConfigError(f"unknown codec {name!r}", key=key) from None
        if info.name == TELEPHONE_EVENT:
            raise ConfigError("telephone-event is not an audio codec; use dtmf", key=key)
        if info not in infos:
            infos.append(info)
    if not infos:
        raise ConfigError("no audio codec configured", key=key)
    return tuple(infos)


def _matches(rtpmap: RtpMap, info: CodecInfo) -> bool:
    if rtpmap.encoding.casefold() != info.name.casefold() or rtpmap.clock_rate != info.clock_rate:
        return False
    # RFC 7587 §7 mandates opus/48000/2 whatever the peer sends, so its count means nothing.
    return info.name == "opus" or rtpmap.channels == info.channels


def _dtmf_pt(media: MediaDescription, clock_rate: int) -> int | None:
    for pt, rtpmap in media.rtpmaps().items():
        is_event = rtpmap.encoding.casefold() == TELEPHONE_EVENT
        if is_event and rtpmap.clock_rate == clock_rate:
            return pt
    return None


def _ptime(requested: int | None) -> int:
    # Every codec we speak frames cleanly at 10 ms multiples; odd requests get the default.
    if requested is not None and 10 <= requested <= 60 and requested % 10 == 0:
        return requested
    return DEFAULT_PTIME


def _rtcp_port(media: MediaDescription) -> int:
    explicit = media.rtcp_port()
    if explicit is not None:
        return explicit
    return media.port + 1 if media.port < 65535 else media.port


def _rtpmap_value(pt: int, info: CodecInfo) -> str:
    channels = f"/{info.channels}" if info.channels != 1 else ""
    return f"{pt} {info.name}/{info.clock_rate}{channels}"


def _crypto_values(media: MediaDescription) -> list[str]:
    return [value for value in media.attribute_values("crypto") if value]


def _session(
    *,
    local_address: str,
    session_id: int,
    session_version: int,
    media: tuple[MediaDescription, ...],
    timings: tuple[Timing, ...] = (Timing(),),
) -> SessionDescription:
    addr_type = _addr_type(local_address)
    return SessionDescription(
        origin=Origin("kefu", session_id, session_version, "IN", addr_type, local_address),
        session_name="kefu",
        connection=Connection(local_address, addr_type),
        timings=timings,
        media=media,
    )


# --- kefu answers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Pick:
    """The codec chosen on one offered m-line."""

    payload_type: int
    info: CodecInfo
    dtmf_payload_type: int | None
    crypto: CryptoAttribute | None = None
    """The offered ``a=crypto`` line kefu accepts (SRTP), None for plain RTP."""


def _pick_codec(
    media: MediaDescription, prefs: tuple[CodecInfo, ...], honour_offer_order: bool, dtmf: bool
) -> _Pick | None:
    offered = media.rtpmaps()
    pairs = [
        (pt, info) for pt, rtpmap in offered.items() for info in prefs if _matches(rtpmap, info)
    ]
    if not pairs:
        return None
    if not honour_offer_order:
        pairs.sort(key=lambda pair: prefs.index(pair[1]))
    pt, info = pairs[0]
    return _Pick(pt, info, _dtmf_pt(media, info.clock_rate) if dtmf else None)


def _try_audio(
    offer: SessionDescription,
    media: MediaDescription,
    prefs: tuple[CodecInfo, ...],
    *,
    honour_offer_order: bool,
    dtmf: bool,
    addr_type: str,
    srtp: SrtpPolicy,
) -> _Pick | NegotiationError:
    refused = _proto_refusal(media.proto, srtp)
    if refused is not None:
        return refused
    conn = media.effective_connection(offer)
    if conn is not None and conn.addr_type != addr_type:
        return NegotiationError(301, f"offer uses {conn.addr_type}, kefu listens on {addr_type}")
    pick = _pick_codec(media, prefs, honour_offer_order, dtmf)
    if pick is None:
        return NegotiationError(305, "no common codec")
    if media.proto in SECURE_PROTOS:
        lines, _ = sdes.crypto_lines(_crypto_values(media))
        crypto = sdes.choose(lines)
        if crypto is None:
            suites = ", ".join(sdes.SUITES)
            return NegotiationError(305, f"no usable a=crypto line (kefu supports {suites})")
        pick = replace(pick, crypto=crypto)
    return pick


def _proto_refusal(proto: str, srtp: SrtpPolicy) -> NegotiationError | None:
    if proto in PLAIN_PROTOS and srtp == "required":
        return NegotiationError(302, f"{proto} audio is refused, kefu requires RTP/SAVP (SRTP)")
    if proto in SECURE_PROTOS and srtp == "off":
        return NegotiationError(302, f"{proto} audio is not supported (SRTP off), only RTP/AVP")
    if proto not in ACCEPTED_PROTOS:
        return NegotiationError(302, f"{proto} audio is not supported, only RTP/AVP or RTP/SAVP")
    return None


def _answer_media(
    offered: MediaDescription,
    pick: _Pick,
    *,
    local_port: int,
    ptime: int,
    direction: Direction,
    crypto: CryptoAttribute | None,
) -> MediaDescription:
    formats = [str(pick.payload_type)]
    attributes: list[Attribute] = [("rtpmap", _rtpmap_value(pick.payload_type, pick.info))]
    if pick.info.name == "opus":
        attributes.append(("fmtp", f"{pick.payload_type} {OPUS_FMTP}"))
    if pick.dtmf_payload_type is not None:
        te = pick.dtmf_payload_type
        formats.append(str(te))
        attributes.append(("rtpmap", f"{te} {TELEPHONE_EVENT}/{pick.info.clock_rate}"))
        events = offered.fmtp(te)
        if events:
            # Echo the offered event range: we must not claim events the offerer lacks.
            attributes.append(("fmtp", f"{te} {events}"))
    if crypto is not None:
        attributes.append(("crypto", crypto.serialize()))
    attributes += [("ptime", str(ptime)), (direction, None)]
    return MediaDescription(
        "audio", local_port, offered.proto, tuple(formats), attributes=tuple(attributes)
    )


def _rejected(offered: MediaDescription) -> MediaDescription:
    # RFC 3264 §6: port 0, same media and proto, at least one format (copied).
    return MediaDescription(offered.media, 0, offered.proto, offered.formats)


def answer_offer(
    offer: SessionDescription,
    *,
    local_address: str,
    local_port: int,
    preferences: Sequence[str] = DEFAULT_PREFERENCES,
    session_id: int | None = None,
    session_version: int | None = None,
    direction_policy: Direction = "sendrecv",
    honour_offer_order: bool = True,
    dtmf: bool = True,
    previous: Negotiated | None = None,
    srtp: SrtpPolicy = "optional",
    srtp_key: bytes | None = None,
) -> Negotiated:
    """Answer ``offer`` with one audio stream; raise :class:`NegotiationError` if none fits.

    An accepted ``RTP/SAVP`` line is answered with one ``a=crypto`` line: the offered
    line's tag and suite and kefu's own key, ``srtp_key`` (30 bytes; a random one when
    None; with ``previous`` on the same suite, the key kefu already uses, so a refresh
    re-INVITE gets the same answer and the stream is not re-keyed).

    ``direction_policy`` is the most kefu is willing to do (``recvonly`` for a listen-only
    leg, ``inactive`` to answer on hold); the answer's direction mirrors the offer within
    it. ``session_id``/``session_version`` are required for a first answer; with
    ``previous`` they are taken from kefu's last description instead (RFC 3264 §8).
    """
    addr_type = _addr_type(local_address)
    _check_port(local_port)
    prefs = _codec_infos(preferences, "preferences")
    if direction_policy not in DIRECTIONS:
        raise ConfigError(f"unknown direction {direction_policy!r}", key="direction_policy")
    accepted: tuple[int, MediaDescription, _Pick] | None = None
    failures: list[NegotiationError] = []
    media: list[MediaDescription] = []
    for index, offered in enumerate(offer.media):
        if accepted is None and offered.media == "audio" and offered.port != 0:
            result = _try_audio(
                offer,
                offered,
                prefs,
                honour_offer_order=honour_offer_order,
                dtmf=dtmf,
                addr_type=addr_type,
                srtp=srtp,
            )
            if isinstance(result, _Pick):
                accepted = (index, offered, result)
                media.append(offered)  # placeholder, replaced below once the direction is known
                continue
            failures.append(result)
        media.append(_rejected(offered))
    if accepted is None:
        # A codec mismatch is the most useful thing to report, a missing stream the least.
        failures.sort(key=lambda e: -e.warn_code)
        raise failures[0] if failures else NegotiationError(304, "no audio stream offered")
    index, offered, pick = accepted
    direction = _our_direction(offered.direction(offer), direction_policy)
    ptime = _ptime(offered.ptime())
    before = previous.srtp if previous is not None else None
    keys = None if pick.crypto is None else sdes.answer_keys(pick.crypto, before, srtp_key)
    ours = None if keys is None else CryptoAttribute(keys.tag, keys.suite, keys.local_key)
    media[index] = _answer_media(
        offered, pick, local_port=local_port, ptime=ptime, direction=direction, crypto=ours
    )
    session_id, session_version = _next_origin(previous, session_id, session_version)
    answer = _session(
        local_address=local_address,
        session_id=session_id,
        session_version=session_version,
        media=tuple(media),
        # RFC 3264 §6: the answer's t= lines must equal the offer's.
        timings=offer.timings,
    )
    if previous is not None and not _same_content(answer, previous.local_sdp):
        answer = replace(answer, origin=replace(answer.origin, session_version=session_version + 1))
    conn = offered.effective_connection(offer)
    return Negotiated(
        answer=answer,
        codec=pick.info.name,
        payload_type=pick.payload_type,
        clock_rate=pick.info.clock_rate,
        channels=pick.info.channels,
        fmtp=offered.fmtp(pick.payload_type),
        dtmf_payload_type=pick.dtmf_payload_type,
        remote_address=conn.address if conn is not None else "0.0.0.0",
        remote_port=offered.port,
        remote_rtcp_port=_rtcp_port(offered),
        ptime=ptime,
        direction=direction,
        media_index=index,
        offer=offer,
        srtp=keys,
    )


def _next_origin(
    previous: Negotiated | None, session_id: int | None, session_version: int | None
) -> tuple[int, int]:
    """The id and the *unbumped* version; callers bump it when the content changed."""
    if previous is not None:
        origin = previous.local_sdp.origin
        return origin.session_id, origin.session_version
    if session_id is None or session_version is None:
        raise TypeError("session_id and session_version are required without previous")
    return session_id, session_version


def _same_content(new: SessionDescription, old: SessionDescription) -> bool:
    """Equal apart from the o= version (RFC 3264 §8: unchanged SDP keeps its version)."""
    aligned = replace(new.origin, session_version=old.origin.session_version)
    return replace(new, origin=aligned) == old

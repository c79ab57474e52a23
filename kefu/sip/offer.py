"""RFC 3264 offer/answer when kefu is the offerer: one audio stream per call.

Delayed offer (an INVITE without SDP, RFC 3261 §13.2.1): kefu offers with :func:`make_offer`
(:func:`continue_origin` for a re-INVITE) and reads the ACK's answer with :func:`accept_answer`
(see :mod:`kefu.sip.delayed_offer`). Outbound calls offer and read the answer the same way.

The answering side, :class:`~kefu.sip.offer_answer.Negotiated` and the helpers both sides
share live in :mod:`kefu.sip.offer_answer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kefu.codecs.info import CodecInfo, codec_info
from kefu.errors import ConfigError, KefuError
from kefu.sip import sdes
from kefu.sip.offer_answer import (
    DEFAULT_PTIME,
    OPUS_FMTP,
    SECURE_PROTOS,
    TELEPHONE_EVENT,
    Negotiated,
    NegotiationError,
    _check_port,
    _codec_infos,
    _crypto_values,
    _dtmf_pt,
    _matches,
    _our_direction,
    _Pick,
    _ptime,
    _rtcp_port,
    _rtpmap_value,
    _same_content,
    _session,
)
from kefu.sip.sdes import SrtpKeys
from kefu.sip.sdp import SessionDescription
from kefu.sip.sdp_fields import DIRECTIONS, Attribute, Direction, MediaDescription

DEFAULT_OFFER_CODECS: tuple[str, ...] = ("PCMU", "PCMA", "G722", "opus")
# Payload types kefu offers for dynamic encodings; the values most SIP gear and browsers use.
_DYNAMIC_PT = (("opus", 48000, 111), (TELEPHONE_EVENT, 8000, 101), (TELEPHONE_EVENT, 48000, 110))


def make_offer(
    *,
    local_address: str,
    local_port: int,
    codecs: Sequence[str] = DEFAULT_OFFER_CODECS,
    dtmf: bool = True,
    direction: Direction = "sendrecv",
    session_id: int,
    session_version: int,
    ptime: int = DEFAULT_PTIME,
    srtp_keys: Sequence[bytes] = (),
) -> SessionDescription:
    """An RTP/AVP audio offer listing ``codecs`` in order (RFC 3264 §5).

    With ``srtp_keys`` (one 30-byte key per suite of :data:`kefu.sip.sdes.SUITES`) the
    offer is ``RTP/SAVP`` with one ``a=crypto`` line per suite (RFC 4568 §5).

    Static codecs use their RFC 3551 numbers; Opus is 111. With ``dtmf``,
    ``telephone-event`` is offered at every clock rate in use (101 at 8 kHz, 110 at 48 kHz)
    so the answerer can pair it with whichever codec it picks (RFC 4733 §7.1.1).
    """
    _check_port(local_port)
    infos = _codec_infos(codecs, "codecs")
    if direction not in DIRECTIONS:
        raise ConfigError(f"unknown direction {direction!r}", key="direction")
    if _ptime(ptime) != ptime:
        raise ConfigError(f"ptime {ptime} is not a multiple of 10 in 10-60 ms", key="ptime")
    formats: list[str] = []
    attributes: list[Attribute] = []
    for info in infos:
        pt = _offer_pt(info.name, info.clock_rate, info.static_payload_type)
        formats.append(str(pt))
        attributes.append(("rtpmap", _rtpmap_value(pt, info)))
        if info.name == "opus":
            attributes.append(("fmtp", f"{pt} {OPUS_FMTP}"))
    if dtmf:
        for clock in sorted({info.clock_rate for info in infos}):
            te = _offer_pt(TELEPHONE_EVENT, clock, None)
            formats.append(str(te))
            attributes += [
                ("rtpmap", f"{te} {TELEPHONE_EVENT}/{clock}"),
                ("fmtp", f"{te} 0-16"),
            ]
    if srtp_keys:
        attributes += [("crypto", line.serialize()) for line in sdes.offer_lines(list(srtp_keys))]
    attributes += [("ptime", str(ptime)), (direction, None)]
    proto = "RTP/SAVP" if srtp_keys else "RTP/AVP"
    audio = MediaDescription(
        "audio", local_port, proto, tuple(formats), attributes=tuple(attributes)
    )
    return _session(
        local_address=local_address,
        session_id=session_id,
        session_version=session_version,
        media=(audio,),
    )


def continue_origin(offer: SessionDescription, previous: Negotiated) -> SessionDescription:
    """``offer`` as the next description of ``previous``'s session (RFC 3264 §8): kefu's
    ``o=`` session id, its version kept when nothing else changed and bumped otherwise."""
    ours = previous.local_sdp.origin
    same = replace(offer.origin, session_id=ours.session_id, session_version=ours.session_version)
    kept = replace(offer, origin=same)
    if _same_content(kept, previous.local_sdp):
        return kept
    return replace(kept, origin=replace(same, session_version=ours.session_version + 1))


def _offer_pt(name: str, clock_rate: int, static: int | None) -> int:
    if static is not None:
        return static
    for known, clock, pt in _DYNAMIC_PT:
        if known == name and clock == clock_rate:
            return pt
    raise ConfigError(f"no payload type assigned for {name}/{clock_rate}", key="codecs")


def accept_answer(offer: SessionDescription, answer: SessionDescription) -> Negotiated:
    """Read the peer's answer to kefu's ``offer`` (RFC 3264 §7).

    The accepted stream is the first audio line both sides left open; its codec is the
    first in the answer that kefu offered (matched by name and clock, RFC 3264 §6.1).
    """
    if len(answer.media) != len(offer.media):
        raise NegotiationError(
            304, f"answer has {len(answer.media)} m= lines, the offer had {len(offer.media)}"
        )
    for index, (ours, theirs) in enumerate(zip(offer.media, answer.media, strict=True)):
        if ours.media != "audio" or ours.port == 0 or theirs.port == 0:
            continue
        if theirs.media != ours.media or theirs.proto != ours.proto:
            raise NegotiationError(302, f"answer changed m= line {index} to {theirs.proto}")
        pick = _answer_pick(ours, theirs)
        ptime = _ptime(theirs.ptime())
        conn = theirs.effective_connection(answer)
        return Negotiated(
            answer=answer,
            codec=pick.info.name,
            payload_type=pick.payload_type,
            clock_rate=pick.info.clock_rate,
            channels=pick.info.channels,
            fmtp=theirs.fmtp(pick.payload_type),
            dtmf_payload_type=pick.dtmf_payload_type,
            remote_address=conn.address if conn is not None else "0.0.0.0",
            remote_port=theirs.port,
            remote_rtcp_port=_rtcp_port(theirs),
            ptime=ptime,
            direction=_our_direction(theirs.direction(answer), ours.direction(offer)),
            media_index=index,
            offer=offer,
            local_is_offerer=True,
            srtp=_answered_keys(ours, theirs),
        )
    raise NegotiationError(304, "the answer accepted no audio stream")


def _answered_keys(ours: MediaDescription, theirs: MediaDescription) -> SrtpKeys | None:
    if ours.proto not in SECURE_PROTOS:
        return None
    keys = sdes.answered_keys(_crypto_values(ours), _crypto_values(theirs))
    if keys is None:
        raise NegotiationError(305, "the answer has no a=crypto line matching kefu's offer")
    return keys


def _answer_pick(ours: MediaDescription, theirs: MediaDescription) -> _Pick:
    offered: list[CodecInfo] = []
    for rtpmap in ours.rtpmaps().values():
        try:
            info = codec_info(rtpmap.encoding)
        except KefuError:
            continue
        if info.name != TELEPHONE_EVENT and _matches(rtpmap, info):
            offered.append(info)
    for pt, rtpmap in theirs.rtpmaps().items():
        for info in offered:
            if _matches(rtpmap, info):
                dtmf_offered = _dtmf_pt(ours, info.clock_rate) is not None
                te = _dtmf_pt(theirs, info.clock_rate) if dtmf_offered else None
                return _Pick(pt, info, te)
    raise NegotiationError(305, "the answer chose no codec kefu offered")

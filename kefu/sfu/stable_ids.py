"""Server offers that keep the RTP ids already negotiated: payload types and extmap ids.

Why: aiortc's ``createOffer()`` rebuilds every transceiver's codec list and header-extension
list from its global defaults (opus = 96, ``sdes:mid`` = 1, ``ssrc-audio-level`` = 2) and
forgets what the browser's offer set up (Chromium: opus = 111, ``ssrc-audio-level`` = 1,
``sdes:mid`` = 4). Both ids must stay as negotiated on a running m-section (RFC 8829 §5.2.2;
RFC 8285 §6 for extmap ids, which BUNDLE makes session-wide, RFC 8843 §9.2):

* Chromium refuses the whole offer when an extension id changes ("RTP extension ID
  reassignment not supported");
* a changed payload type is accepted, but aiortc's ``RTCRtpSender`` keeps stamping the one it
  started with, which the browser then no longer decodes.

How: :func:`create_offer` is the only way kefu makes an offer. It notes the ids of every
transceiver that already has a mid (``_codecs``/``_headerExtensions`` hold what the last
answer or offer negotiated), lets aiortc create its offer, rewrites the offer's ids through
:func:`rewrite_offer` (aiortc's own SDP parser and serializer, so the text stays what aiortc
would write) and puts the same ids back on the transceivers, so that aiortc's receive path
and kefu's forwarding tap agree with the offer until the answer replaces them. New
m-sections get the ids already in use for the same codec/URI; a default id that would clash
moves to a free one. Only private attributes documented here are touched; if aiortc renames
them, :func:`create_offer` raises instead of sending an offer with the wrong ids.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.rtcrtpparameters import RTCRtpCodecParameters, RTCRtpHeaderExtensionParameters
from aiortc.sdp import SessionDescription

DYNAMIC_PTS = range(96, 128)  # RFC 3551 §3
ONE_BYTE_IDS = range(1, 15)  # RFC 8285 §4.2; aiortc writes one-byte headers only
TWO_BYTE_IDS = range(15, 256)  # RFC 8285 §4.3

CodecKey = tuple[Any, ...]


def codec_key(codec: RTCRtpCodecParameters, by_pt: Mapping[int, RTCRtpCodecParameters]) -> CodecKey:
    """What makes two codec entries "the same codec": RTX is keyed by the codec it repairs."""
    mime = codec.mimeType.lower()
    if mime.endswith("/rtx"):
        target = by_pt.get(_int(codec.parameters.get("apt")))
        return ("rtx", codec.clockRate, codec_key(target, {}) if target is not None else None)
    params = tuple(sorted((k, str(v)) for k, v in codec.parameters.items()))
    return (mime, codec.clockRate, codec.channels or 1, params)


def _loose(key: CodecKey) -> CodecKey:
    return key[:3]


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return -1


@dataclass(slots=True)
class IdPlan:
    """Ids of one session: what is negotiated, and what the rewritten offer uses."""

    extmap: dict[str, int] = field(default_factory=dict)
    """uri -> id, session-wide under BUNDLE (RFC 8843 §9.2)."""
    payload_types: dict[CodecKey, int] = field(default_factory=dict)
    """codec key -> payload type (RFC 8829 §5.2.2: kept across offers)."""
    pt_owner: dict[int, CodecKey] = field(default_factory=dict)
    """payload type -> codec key, so one number never names two codecs in the session."""

    @classmethod
    def negotiated(cls, sections: Iterable[tuple[list[Any], list[Any]]]) -> IdPlan:
        """From (codecs, header extensions) of every m-section negotiated so far."""
        plan = cls()
        for codecs, extensions in sections:
            for ext in extensions:
                plan.extmap.setdefault(ext.uri, ext.id)
            by_pt = {c.payloadType: c for c in codecs}
            for codec in codecs:
                key = codec_key(codec, by_pt)
                if codec.payloadType not in plan.pt_owner and key not in plan.payload_types:
                    plan.payload_types[key] = codec.payloadType
                    plan.pt_owner[codec.payloadType] = key
        return plan

    def extension_id(self, uri: str, proposed: int) -> int:
        known = self.extmap.get(uri)
        if known is not None:
            return known
        used = set(self.extmap.values())
        if proposed in used:
            proposed = next(i for i in (*ONE_BYTE_IDS, *TWO_BYTE_IDS) if i not in used)
        self.extmap[uri] = proposed
        return proposed

    def payload_type(self, key: CodecKey, proposed: int, taken_here: set[int]) -> int:
        pt = self.payload_types.get(key)
        if pt is None:
            loose = [v for k, v in self.payload_types.items() if _loose(k) == _loose(key)]
            pt = loose[0] if len(loose) == 1 else None
        if pt is None or pt in taken_here:
            owner = self.pt_owner.get(proposed)
            if (owner is None or owner == key) and proposed not in taken_here:
                pt = proposed
            else:
                busy = set(self.pt_owner) | taken_here
                pt = next(p for p in DYNAMIC_PTS if p not in busy)
        self.payload_types.setdefault(key, pt)
        self.pt_owner.setdefault(pt, key)
        taken_here.add(pt)
        return pt


def renumber_codecs(codecs: list[Any], plan: IdPlan) -> dict[int, int]:
    """Old -> new payload type for one m-section (base codecs first, then their RTX)."""
    by_pt = {c.payloadType: c for c in codecs}
    taken: set[int] = set()
    mapping: dict[int, int] = {}
    ordered = sorted(codecs, key=lambda c: c.mimeType.lower().endswith("/rtx"))
    for codec in ordered:
        key = codec_key(codec, by_pt)
        mapping[codec.payloadType] = plan.payload_type(key, codec.payloadType, taken)
    return mapping


def _renumbered(codec: RTCRtpCodecParameters, mapping: Mapping[int, int]) -> RTCRtpCodecParameters:
    # a copy: aiortc's offer lists share codec objects with its module-level defaults
    out = copy.deepcopy(codec)
    if codec.payloadType is not None:
        out.payloadType = mapping.get(codec.payloadType, codec.payloadType)
    if "apt" in out.parameters:
        apt = _int(out.parameters["apt"])
        out.parameters["apt"] = mapping.get(apt, apt)
    return out


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The rewritten offer and the ids each of its m-sections now uses."""

    sdp: str
    """The offer text (RFC 8866) with kept ids."""
    payload_types: Mapping[int, tuple[str, Mapping[int, int]]]
    """m-line index -> (mid, aiortc's payload type -> offered payload type)."""
    extmap: Mapping[str, int]
    """uri -> offered extmap id (session-wide)."""


def rewrite_offer(sdp: str, plan: IdPlan) -> Rewrite:
    """Give the ids of ``plan`` to the codecs and extensions of offer ``sdp``."""
    description = SessionDescription.parse(sdp)
    sections: dict[int, tuple[str, Mapping[int, int]]] = {}
    for index, media in enumerate(description.media):
        if media.kind not in ("audio", "video"):
            continue
        mapping = renumber_codecs(media.rtp.codecs, plan)
        media.rtp.codecs = [_renumbered(c, mapping) for c in media.rtp.codecs]
        media.fmt = [mapping.get(pt, pt) for pt in media.fmt]
        media.rtp.headerExtensions = [
            RTCRtpHeaderExtensionParameters(id=plan.extension_id(e.uri, e.id), uri=e.uri)
            for e in media.rtp.headerExtensions
        ]
        sections[index] = (str(media.rtp.muxId), mapping)
    return Rewrite(str(description), sections, dict(plan.extmap))


async def create_offer(pc: RTCPeerConnection) -> RTCSessionDescription:
    """``pc.createOffer()`` with the ids negotiated so far kept (see module doc)."""
    transceivers = pc.getTransceivers()
    for t in transceivers:
        needed = ("_codecs", "_headerExtensions", "_get_mline_index")
        if not all(hasattr(t, name) for name in needed):
            raise RuntimeError("aiortc transceivers changed: kefu.sfu.stable_ids needs updating")
    plan = IdPlan.negotiated(
        (t._codecs, t._headerExtensions) for t in transceivers if t.mid is not None
    )
    offer = await pc.createOffer()
    rewrite = rewrite_offer(offer.sdp, plan)
    for t in transceivers:
        # new transceivers get their mid only in setLocalDescription: find them by m-line
        index = t._get_mline_index()
        section = rewrite.payload_types.get(-1 if index is None or t.stopped else index)
        if section is None or t.mid not in (None, section[0]):
            continue
        mapping = section[1]
        t._codecs = [_renumbered(c, mapping) for c in t._codecs]
        t._headerExtensions = [
            RTCRtpHeaderExtensionParameters(id=rewrite.extmap.get(e.uri, e.id), uri=e.uri)
            for e in t._headerExtensions
        ]
    return RTCSessionDescription(sdp=rewrite.sdp, type="offer")

"""SRTP/SRTCP for a SIP leg (RFC 3711), keyed by SDES (RFC 4568, :mod:`kefu.sip.sdes`).

:class:`SrtpContext` wraps libsrtp (pylibsrtp, which aiortc already depends on): one session
protects what kefu sends with kefu's key, one unprotects what the peer sends with the peer's
key, each over RTP and RTCP (told apart as RFC 5761 does). A datagram that fails
authentication, is replayed or is too short is **dropped and counted**, never handed on:
garbage never reaches a decoder, so the caller never hears it. No I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import pylibsrtp

from kefu.rtp.packet import is_rtcp
from kefu.sip.sdes import SrtpKeys

__all__ = ["SRTP_DROP_REASONS", "SrtpContext", "SrtpDrop"]

_PROFILES = {
    "AES_CM_128_HMAC_SHA1_80": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80,
    "AES_CM_128_HMAC_SHA1_32": pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_32,
}
SRTP_DROP_REASONS = ("srtp_auth", "srtp_replay", "srtp_malformed")
"""Why an inbound datagram was dropped (a bounded metric label set)."""
_MIN_RTP = 12 + 4  # header + the shortest tag (32 bits)
_MIN_RTCP = 8 + 4 + 10  # header + SSRC... + E/index + 80-bit tag


@dataclass(frozen=True, slots=True)
class SrtpDrop:
    """An inbound datagram SRTP refused."""

    reason: str
    """One of :data:`SRTP_DROP_REASONS`."""
    rtcp: bool
    """True for SRTCP."""
    detail: str
    """libsrtp's words, for the first log line."""


class SrtpContext:
    """Both directions of one stream's SRTP; see the module docstring."""

    def __init__(self, keys: SrtpKeys) -> None:
        profile = _PROFILES.get(keys.suite)
        if profile is None:
            raise ValueError(f"unsupported SRTP suite {keys.suite!r}")
        self.keys = keys
        self._tx = pylibsrtp.Session(
            pylibsrtp.Policy(
                key=keys.local_key,
                ssrc_type=pylibsrtp.Policy.SSRC_ANY_OUTBOUND,
                srtp_profile=profile,
            )
        )
        self._rx = pylibsrtp.Session(
            pylibsrtp.Policy(
                key=keys.remote_key,
                ssrc_type=pylibsrtp.Policy.SSRC_ANY_INBOUND,
                srtp_profile=profile,
            )
        )
        self.dropped: dict[str, int] = dict.fromkeys(SRTP_DROP_REASONS, 0)
        """Inbound datagrams dropped, by reason (the call's own counter)."""

    def protect_rtp(self, packet: bytes) -> bytes:
        return bytes(self._tx.protect(packet))

    def protect_rtcp(self, packet: bytes) -> bytes:
        return bytes(self._tx.protect_rtcp(packet))

    def unprotect(self, data: bytes) -> bytes | SrtpDrop:
        """The clear RTP or RTCP packet in ``data``, or why it was dropped (counted)."""
        rtcp = is_rtcp(data)
        if len(data) < (_MIN_RTCP if rtcp else _MIN_RTP):
            return self._drop("srtp_malformed", rtcp, "too short for SRTP")
        try:
            clear = self._rx.unprotect_rtcp(data) if rtcp else self._rx.unprotect(data)
        except pylibsrtp.Error as exc:
            text = str(exc)
            reason = "srtp_replay" if "replay" in text else "srtp_auth"
            return self._drop(reason, rtcp, text)
        return bytes(clear)

    def _drop(self, reason: str, rtcp: bool, detail: str) -> SrtpDrop:
        self.dropped[reason] += 1
        return SrtpDrop(reason, rtcp, detail)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

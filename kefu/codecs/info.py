"""Static facts about the audio codecs kefu speaks (RFC 3551 and RFC 7587)."""

from __future__ import annotations

from dataclasses import dataclass

from kefu.errors import CodecError, LocalError

__all__ = ["SUPPORTED_AUDIO", "CodecInfo", "FrameSizeError", "codec_info"]


class FrameSizeError(LocalError, ValueError):
    """A caller handed an encoder a PCM buffer that is not exactly one frame.

    This is kefu's own misuse (the media pipeline framed the audio wrongly), never a peer's
    fault, hence a :class:`~kefu.errors.LocalError`.
    """


@dataclass(frozen=True, slots=True)
class CodecInfo:
    """One audio codec as negotiated in SDP and carried in RTP."""

    name: str
    """Canonical SDP encoding name (RFC 4566 §6 ``a=rtpmap``), e.g. ``"PCMU"`` or ``"opus"``."""

    clock_rate: int
    """RTP timestamp clock (RFC 3551 §4.5). G.722 says 8000 although it samples at 16 kHz
    (RFC 3551 §4.5.2, kept for historical compatibility)."""

    sample_rate: int
    """Rate of the PCM the codec consumes and produces."""

    channels: int
    """SDP channel count (RFC 3551 §4.1). Opus is always ``opus/48000/2`` (RFC 7587 §7)."""

    static_payload_type: int | None
    """Static RTP payload type from RFC 3551 §6 Table 4, or None for a dynamic one."""

    def frame_samples(self, ptime_ms: int = 20) -> int:
        """PCM samples (per channel, at :attr:`sample_rate`) in one packet of ``ptime_ms``."""
        return self.sample_rate * ptime_ms // 1000

    def rtp_timestamp_step(self, ptime_ms: int = 20) -> int:
        """RTP clock ticks one packet of ``ptime_ms`` advances the timestamp by."""
        return self.clock_rate * ptime_ms // 1000


_CODECS: tuple[CodecInfo, ...] = (
    CodecInfo("PCMU", 8000, 8000, 1, 0),
    CodecInfo("PCMA", 8000, 8000, 1, 8),
    CodecInfo("G722", 8000, 16000, 1, 9),
    CodecInfo("opus", 48000, 48000, 2, None),
    CodecInfo("telephone-event", 8000, 8000, 1, None),
)

SUPPORTED_AUDIO: tuple[str, ...] = ("opus", "G722", "PCMU", "PCMA")
"""Audio codecs kefu can transcode, in the order it prefers them in an offer."""


def codec_info(name: str) -> CodecInfo:
    """Look a codec up by its SDP encoding name, ignoring case (RFC 4566 §6 says names are
    case-insensitive). Unknown names raise :class:`~kefu.errors.CodecError`."""
    folded = name.casefold()
    for info in _CODECS:
        if info.name.casefold() == folded:
            return info
    raise CodecError(f"unsupported codec {name!r}")

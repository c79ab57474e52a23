"""G.711 µ-law (PCMU) and A-law (PCMA), vectorised through lookup tables.

The tables are computed once at import from the ITU-T G.711 segment/quantisation rules (the
same arithmetic as the classic Sun Microsystems ``g711.c``), as read-only numpy arrays indexed
by the 16-bit sample (encode) or the 8-bit code (decode). A table lookup costs a few µs per
20 ms frame, far below what the per-sample arithmetic would cost in Python.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from kefu.codecs.info import CodecInfo, FrameSizeError, codec_info
from kefu.codecs.plc import WaveformConcealer

__all__ = [
    "G711Decoder",
    "G711Encoder",
    "alaw_decode",
    "alaw_encode",
    "ulaw_decode",
    "ulaw_encode",
]

_T = TypeVar("_T", bound=np.generic)

_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159
"""Largest µ-law magnitude after the 2-bit right shift (14-bit domain), G.711 Table 2a."""


def _all_int16() -> NDArray[np.int32]:
    # index i of the encode tables is the int16 sample whose bit pattern is i
    return np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32)


def _build_ulaw_encode() -> NDArray[np.uint8]:
    x = _all_int16() >> 2
    negative = x < 0
    magnitude = np.minimum(np.abs(x), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    # segment s covers biased magnitudes [64 << (s-1), 64 << s); 8 means "beyond the top"
    segment = np.searchsorted(64 << np.arange(8), magnitude, side="right")
    mantissa = (magnitude >> (segment + 1)) & 0x0F
    code = np.where(segment >= 8, 0x7F, (segment << 4) | mantissa)
    mask = np.where(negative, 0x7F, 0xFF)
    return _freeze((code ^ mask).astype(np.uint8))


def _build_alaw_encode() -> NDArray[np.uint8]:
    x = _all_int16() >> 3
    negative = x < 0
    # A-law is sign-magnitude in one's complement: -1 and 0 share magnitude 0
    magnitude = np.where(negative, -x - 1, x)
    segment = np.searchsorted(32 << np.arange(8), magnitude, side="right")
    mantissa = np.where(segment < 2, magnitude >> 1, magnitude >> np.maximum(segment, 1)) & 0x0F
    code = np.where(segment >= 8, 0x7F, (segment << 4) | mantissa)
    mask = np.where(negative, 0x55, 0xD5)
    return _freeze((code ^ mask).astype(np.uint8))


def _build_ulaw_decode() -> NDArray[np.int16]:
    inverted = ~np.arange(256, dtype=np.int32) & 0xFF
    segment = (inverted >> 4) & 0x07
    level = (((inverted & 0x0F) << 3) + _ULAW_BIAS) << segment
    value = np.where(inverted & 0x80, _ULAW_BIAS - level, level - _ULAW_BIAS)
    return _freeze(value.astype(np.int16))


def _build_alaw_decode() -> NDArray[np.int16]:
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code >> 4) & 0x07
    level = ((code & 0x0F) << 4) + np.where(segment == 0, 8, 0x108)
    level = level << np.maximum(segment - 1, 0)
    value = np.where(code & 0x80, level, -level)
    return _freeze(value.astype(np.int16))


def _freeze(table: NDArray[_T]) -> NDArray[_T]:
    table.setflags(write=False)
    return table


_ULAW_ENCODE = _build_ulaw_encode()
_ALAW_ENCODE = _build_alaw_encode()
_ULAW_DECODE = _build_ulaw_decode()
_ALAW_DECODE = _build_alaw_decode()


def _check_pcm(pcm: NDArray[np.int16]) -> NDArray[np.uint16]:
    if pcm.dtype != np.int16:
        raise TypeError(f"G.711 encodes int16 PCM, got {pcm.dtype}")
    return pcm.reshape(-1).view(np.uint16)


def ulaw_encode(pcm: NDArray[np.int16]) -> bytes:
    """Encode int16 PCM (8 kHz) to G.711 µ-law, one byte per sample."""
    return _ULAW_ENCODE[_check_pcm(pcm)].tobytes()


def ulaw_decode(data: bytes) -> NDArray[np.int16]:
    """Decode G.711 µ-law bytes to int16 PCM, one sample per byte."""
    return _ULAW_DECODE[np.frombuffer(data, np.uint8)]


def alaw_encode(pcm: NDArray[np.int16]) -> bytes:
    """Encode int16 PCM (8 kHz) to G.711 A-law, one byte per sample."""
    return _ALAW_ENCODE[_check_pcm(pcm)].tobytes()


def alaw_decode(data: bytes) -> NDArray[np.int16]:
    """Decode G.711 A-law bytes to int16 PCM, one sample per byte."""
    return _ALAW_DECODE[np.frombuffer(data, np.uint8)]


class G711Encoder:
    """PCMU or PCMA encoder for frames of ``ptime_ms``."""

    def __init__(self, name: str, *, ptime_ms: int = 20) -> None:
        self.info: CodecInfo = codec_info(name)
        if self.info.name not in ("PCMU", "PCMA"):
            raise ValueError(f"{name!r} is not G.711")
        self._table = _ULAW_ENCODE if self.info.name == "PCMU" else _ALAW_ENCODE
        self._frame = self.info.frame_samples(ptime_ms)

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        """Encode exactly one frame of mono int16 PCM at 8 kHz."""
        if pcm.size != self._frame:
            raise FrameSizeError(
                f"{self.info.name}: expected {self._frame} samples, got {pcm.size}"
            )
        return self._table[_check_pcm(pcm)].tobytes()


class G711Decoder:
    """PCMU or PCMA decoder with waveform-repetition concealment."""

    def __init__(self, name: str) -> None:
        self.info: CodecInfo = codec_info(name)
        if self.info.name not in ("PCMU", "PCMA"):
            raise ValueError(f"{name!r} is not G.711")
        self._table = _ULAW_DECODE if self.info.name == "PCMU" else _ALAW_DECODE
        self._plc = WaveformConcealer(self.info.sample_rate)

    def decode(self, payload: bytes) -> NDArray[np.int16]:
        """Decode one RTP payload; every byte string is valid G.711."""
        return self._plc.good(self._table[np.frombuffer(payload, np.uint8)])

    def conceal(self, samples: int) -> NDArray[np.int16]:
        """Stand in for a lost frame of ``samples`` samples."""
        return self._plc.conceal(samples)

"""Opus (RFC 6716, RTP per RFC 7587) through libopus in PyAV.

Always 48 kHz. The encoder takes mono or stereo PCM; the decoder always returns mono, letting
libopus downmix a stereo stream (the RTP payload may be either, whatever SDP says).

Concealment uses libopus' own PLC: RFC 6716 §3.2.1 lets a code-0 packet carry a zero-length
frame, which libopus decodes as "frame lost". Feeding the last packet's TOC byte alone
therefore runs the real PLC (and later the real FEC/CELT recovery) through PyAV, which has no
other way to pass a missing packet to the decoder.
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np
from numpy.typing import NDArray

from kefu.codecs.info import CodecInfo, FrameSizeError, codec_info
from kefu.errors import CodecError

__all__ = ["OpusDecoder", "OpusEncoder"]

_SAMPLE_RATE = 48000
_PTIMES_MS = (5, 10, 20, 40, 60)


class OpusEncoder:
    """libopus encoder: 48 kHz, ``channels`` 1 or 2, VoIP mode, ``bitrate`` bit/s.

    ``fec`` turns on in-band FEC (RFC 6716 §2.1.7) tuned for 10 % loss; it only helps a
    receiver that decodes FEC, which browsers do (kefu's own decoder conceals instead).
    """

    def __init__(
        self,
        *,
        bitrate: int = 32000,
        channels: int = 1,
        ptime_ms: int = 20,
        fec: bool = False,
    ) -> None:
        if channels not in (1, 2):
            raise ValueError(f"opus: channels must be 1 or 2, not {channels}")
        if ptime_ms not in _PTIMES_MS:
            raise ValueError(f"opus: ptime must be one of {_PTIMES_MS} ms, not {ptime_ms}")
        if not 6000 <= bitrate <= 510000:
            raise ValueError(f"opus: bitrate {bitrate} outside 6000..510000 (RFC 6716 §2.1.1)")
        self.info: CodecInfo = codec_info("opus")
        self.channels = channels
        self._frame = self.info.frame_samples(ptime_ms)
        self._layout = "mono" if channels == 1 else "stereo"
        ctx: Any = av.CodecContext.create("libopus", "w")
        ctx.sample_rate = _SAMPLE_RATE
        ctx.layout = self._layout
        ctx.format = "s16"
        ctx.bit_rate = bitrate
        ctx.options = {
            "application": "voip",
            "frame_duration": str(ptime_ms),
            "fec": "1" if fec else "0",
            # libopus only spends bits on FEC when told to expect loss
            "packet_loss": "10" if fec else "0",
        }
        ctx.open()
        self._ctx = ctx
        self._pts = 0

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        """Encode one frame: shape ``(n,)`` (mono; duplicated when the encoder is stereo) or
        ``(n, 2)`` (interleaved stereo, only when the encoder is stereo), n = 48 * ptime."""
        if pcm.ndim == 1 and self.channels == 2:
            pcm = np.repeat(pcm, 2)
        elif pcm.ndim == 2 and pcm.shape[1] != self.channels:
            raise FrameSizeError(f"opus: expected {self.channels} channel(s), got {pcm.shape}")
        if pcm.size != self._frame * self.channels:
            raise FrameSizeError(f"opus: expected {self._frame} samples/channel, got {pcm.shape}")
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1),
            format="s16",
            layout=self._layout,
        )
        frame.sample_rate = _SAMPLE_RATE
        frame.pts = self._pts
        self._pts += self._frame
        return b"".join(bytes(packet) for packet in self._ctx.encode(frame))


class OpusDecoder:
    """libopus decoder to mono int16 at 48 kHz, with libopus packet-loss concealment."""

    def __init__(self) -> None:
        self.info: CodecInfo = codec_info("opus")
        ctx: Any = av.CodecContext.create("libopus", "r")
        ctx.sample_rate = _SAMPLE_RATE
        # asking for mono makes libopus downmix stereo streams itself
        ctx.layout = "mono"
        self._ctx = ctx
        self._last_toc: int | None = None

    def decode(self, payload: bytes) -> NDArray[np.int16]:
        """Decode one RTP payload; malformed ones raise :class:`~kefu.errors.CodecError`."""
        if not payload:
            raise CodecError("opus: empty payload (RFC 6716 §3.4 R1: at least one byte)")
        pcm = self._decode(payload)
        self._last_toc = payload[0]
        return pcm

    def conceal(self, samples: int) -> NDArray[np.int16]:
        """Stand in for a lost frame of ``samples`` samples using libopus PLC."""
        if self._last_toc is None:
            return np.zeros(max(samples, 0), np.int16)
        # same configuration and stereo flag, frame-count code 0, zero-length frame
        probe = bytes([self._last_toc & 0xFC])
        parts: list[NDArray[np.int16]] = []
        have = 0
        while have < samples:
            chunk = self._decode(probe)
            if chunk.size == 0:
                break
            parts.append(chunk)
            have += chunk.size
        if have < samples:
            parts.append(np.zeros(samples - have, np.int16))
        return np.concatenate(parts)[:samples] if parts else np.zeros(0, np.int16)

    def _decode(self, payload: bytes) -> NDArray[np.int16]:
        try:
            frames = self._ctx.decode(av.Packet(payload))
        except av.FFmpegError as exc:
            raise CodecError(f"opus: undecodable payload of {len(payload)} bytes: {exc}") from exc
        parts: list[NDArray[np.int16]] = []
        for frame in frames:
            data = frame.to_ndarray().reshape(-1)
            channels = frame.layout.nb_channels
            if channels > 1:
                data = data.reshape(-1, channels).mean(axis=1).astype(np.int16)
            parts.append(data)
        if not parts:
            return np.zeros(0, np.int16)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

"""G.722 (SB-ADPCM, 64 kbit/s) through FFmpeg's codec in PyAV.

G.722 samples at 16 kHz and emits one byte per two samples, so 20 ms = 320 samples = 160
bytes. Its RTP clock is 8000 Hz all the same (RFC 3551 §4.5.2). Every byte string is a valid
G.722 stream, so decoding cannot fail on content; concealment is kefu's waveform repetition
(G.722 Appendix III/IV PLC is not in FFmpeg).
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np
from numpy.typing import NDArray

from kefu.codecs.info import CodecInfo, FrameSizeError, codec_info
from kefu.codecs.plc import WaveformConcealer
from kefu.errors import CodecError

__all__ = ["G722Decoder", "G722Encoder"]


class G722Encoder:
    """G.722 encoder for frames of ``ptime_ms`` (any whole number of ms)."""

    def __init__(self, *, ptime_ms: int = 20) -> None:
        self.info: CodecInfo = codec_info("G722")
        self._frame = self.info.frame_samples(ptime_ms)
        ctx: Any = av.CodecContext.create("g722", "w")
        ctx.sample_rate = self.info.sample_rate
        ctx.layout = "mono"
        ctx.format = "s16"
        # PyAV re-frames input to the codec's frame_size; make that exactly one packet
        ctx.options = {"frame_size": str(self._frame)}
        ctx.open()
        self._ctx = ctx

    def encode(self, pcm: NDArray[np.int16]) -> bytes:
        """Encode exactly one frame of mono int16 PCM at 16 kHz."""
        if pcm.size != self._frame:
            raise FrameSizeError(f"G722: expected {self._frame} samples, got {pcm.size}")
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = self.info.sample_rate
        return b"".join(bytes(packet) for packet in self._ctx.encode(frame))


class G722Decoder:
    """G.722 decoder with waveform-repetition concealment."""

    def __init__(self) -> None:
        self.info: CodecInfo = codec_info("G722")
        ctx: Any = av.CodecContext.create("g722", "r")
        ctx.sample_rate = self.info.sample_rate
        ctx.layout = "mono"
        self._ctx = ctx
        self._plc = WaveformConcealer(self.info.sample_rate)

    def decode(self, payload: bytes) -> NDArray[np.int16]:
        """Decode one RTP payload to mono int16 PCM at 16 kHz (two samples per byte)."""
        if not payload:
            # an empty packet would mean "end of stream" to FFmpeg
            return np.zeros(0, np.int16)
        try:
            frames = self._ctx.decode(av.Packet(payload))
        except av.FFmpegError as exc:
            raise CodecError(f"G722: undecodable payload of {len(payload)} bytes: {exc}") from exc
        if not frames:
            return np.zeros(0, np.int16)
        pcm: NDArray[np.int16] = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
        return self._plc.good(pcm)

    def conceal(self, samples: int) -> NDArray[np.int16]:
        """Stand in for a lost frame of ``samples`` samples."""
        return self._plc.conceal(samples)

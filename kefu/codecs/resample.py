"""Sample-rate conversion: steady framed streams (FFmpeg swresample) and whole buffers (soxr).

:class:`StreamResampler` uses swresample through PyAV rather than soxr's streaming mode
because soxr buffers internally and releases output in ~145 ms bursts, which would break the
one-frame-in, one-frame-out pacing of RTP. swresample's delay is a few samples.
"""

from __future__ import annotations

from typing import Any

import av
import numpy as np
import soxr
from numpy.typing import NDArray

__all__ = ["StreamResampler", "resample"]


class StreamResampler:
    """Convert a mono int16 stream between rates, emitting exact ``frame_ms`` frames.

    Whatever does not fill a whole output frame is carried over to the next call, so the
    held remainder is always shorter than one frame.
    """

    def __init__(self, in_rate: int, out_rate: int, frame_ms: int = 20) -> None:
        if in_rate <= 0 or out_rate <= 0 or frame_ms <= 0:
            raise ValueError(f"bad resampler setup {in_rate} -> {out_rate} Hz, {frame_ms} ms")
        if out_rate * frame_ms % 1000:
            raise ValueError(f"{frame_ms} ms is not a whole number of samples at {out_rate} Hz")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.frame_samples = out_rate * frame_ms // 1000
        self._pending: NDArray[np.int16] = np.zeros(0, np.int16)
        self._resampler: Any = (
            None
            if in_rate == out_rate
            else av.AudioResampler(format="s16", layout="mono", rate=out_rate)
        )

    def process(self, pcm: NDArray[np.int16]) -> list[NDArray[np.int16]]:
        """Feed any number of input samples; returns the whole output frames now available."""
        converted = self._convert(pcm.reshape(-1)) if pcm.size else pcm.reshape(-1)
        pending = np.concatenate((self._pending, converted)) if self._pending.size else converted
        whole = len(pending) // self.frame_samples * self.frame_samples
        frames = [
            pending[i : i + self.frame_samples].copy() for i in range(0, whole, self.frame_samples)
        ]
        self._pending = pending[whole:].copy()
        return frames

    def _convert(self, pcm: NDArray[np.int16]) -> NDArray[np.int16]:
        if self._resampler is None:
            return pcm.astype(np.int16, copy=False)
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = self.in_rate
        out = [f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame)]
        if not out:
            return np.zeros(0, np.int16)
        result: NDArray[np.int16] = np.concatenate(out) if len(out) > 1 else out[0]
        return result


def resample(pcm: NDArray[np.int16], in_rate: int, out_rate: int) -> NDArray[np.int16]:
    """Convert a whole mono int16 buffer with soxr's high-quality filter."""
    if in_rate == out_rate:
        return pcm.copy()
    out: NDArray[np.int16] = soxr.resample(pcm.reshape(-1), in_rate, out_rate, quality="HQ")
    return out

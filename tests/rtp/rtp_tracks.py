"""Test media tracks for the RTP loopback tests and the echo benchmark."""

from __future__ import annotations

import asyncio
import fractions
import math

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack


class ToneTrack(MediaStreamTrack):
    """A sine tone in real time, like a WAV file being played: 20 ms frames of any format.

    ``frames`` limits its length (then it ends with MediaStreamError, like a file).
    """

    kind = "audio"

    def __init__(
        self,
        freq: float = 440.0,
        rate: int = 48000,
        layout: str = "stereo",
        fmt: str = "s16",
        frames: int | None = None,
        amplitude: float = 0.3,
    ) -> None:
        super().__init__()
        self.freq, self.rate, self.layout, self.fmt = freq, rate, layout, fmt
        self.frames = frames
        self.amplitude = amplitude
        self._n = 0
        self._start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live" or (self.frames is not None and self._n >= self.frames):
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self._start is None:
            self._start = loop.time()
        wait = self._start + self._n * 0.02 - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        samples = self.rate // 50
        t = (np.arange(samples) + self._n * samples) / self.rate
        wave = self.amplitude * np.sin(2 * math.pi * self.freq * t)
        channels = 2 if self.layout == "stereo" else 1
        if self.fmt == "s16":
            pcm = (wave * 32767).astype(np.int16)
            data = np.repeat(pcm, channels).reshape(1, -1)  # packed: interleaved
        else:  # fltp: one plane per channel
            data = np.tile(wave.astype(np.float32), (channels, 1))
        frame = av.AudioFrame.from_ndarray(data, format=self.fmt, layout=self.layout)
        frame.sample_rate = self.rate
        frame.pts = self._n * samples
        frame.time_base = fractions.Fraction(1, self.rate)
        self._n += 1
        return frame


def tone_power(pcm: np.ndarray, rate: int, freq: float) -> float:
    """Share of the signal's energy at ``freq`` (Goertzel over the whole buffer), 0..1."""
    x = pcm.astype(np.float64)
    if not x.any():
        return 0.0
    n = np.arange(x.shape[0])
    ref = np.exp(-2j * math.pi * freq * n / rate)
    at_freq = 2 * abs(np.dot(x, ref)) ** 2 / x.shape[0]
    return float(at_freq / np.dot(x, x))


def median_tone_power(pcm: np.ndarray, rate: int, freq: float, window_ms: int = 100) -> float:
    """Median over windows of tone_power: one glitch (a concealed frame on a loaded CI box)
    does not fail a test that checks the audio made it through."""
    n = rate * window_ms // 1000
    powers = [tone_power(pcm[i : i + n], rate, freq) for i in range(0, len(pcm) - n + 1, n)]
    return float(np.median(powers)) if powers else 0.0

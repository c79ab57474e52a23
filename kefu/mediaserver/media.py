"""What a call plays back when the AI does not speak: echo, a prompt and then echo, or
silence while a human has taken over.

All are tracks; the RTP sender paces them on the RTP clock, so these tracks hand out frames
as fast as they are asked for.
"""

from __future__ import annotations

import asyncio
import fractions
import wave
from pathlib import Path

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from numpy.typing import NDArray

from kefu.codecs.resample import resample

PROMPT_RATE = 16000
FRAME_MS = 20


def load_wav(path: str | Path, rate: int = PROMPT_RATE) -> NDArray[np.int16]:
    """Read a PCM WAV (any rate, mono or stereo, 16-bit) as mono int16 at ``rate``."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported")
        channels, src_rate = wav.getnchannels(), wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
    return resample(pcm.astype(np.int16), src_rate, rate) if src_rate != rate else pcm


def chime(rate: int = PROMPT_RATE) -> NDArray[np.int16]:
    """The built-in prompt: two short tones (E5, C5), 0.6 s, with soft edges."""
    parts = []
    for freq in (659.25, 523.25):
        t = np.arange(int(0.3 * rate)) / rate
        envelope = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.02)
        parts.append(0.3 * 32767 * envelope * np.sin(2 * np.pi * freq * t))
    out: NDArray[np.int16] = np.concatenate(parts).astype(np.int16)
    return out


class PcmTrack(MediaStreamTrack):
    """Plays a PCM buffer once in 20 ms frames, then ends."""

    kind = "audio"

    def __init__(self, pcm: NDArray[np.int16], rate: int = PROMPT_RATE) -> None:
        super().__init__()
        self._pcm = pcm
        self._rate = rate
        self._step = rate * FRAME_MS // 1000
        self._pos = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live" or self._pos >= len(self._pcm):
            self.stop()
            raise MediaStreamError
        chunk = self._pcm[self._pos : self._pos + self._step]
        if len(chunk) < self._step:
            chunk = np.pad(chunk, (0, self._step - len(chunk)))
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._pos
        frame.time_base = fractions.Fraction(1, self._rate)
        self._pos += self._step
        return frame


class PromptThenEcho(MediaStreamTrack):
    """The prompt first; then the caller's own audio.

    While the prompt plays, the caller's frames are read and discarded so that the echo starts
    fresh instead of replaying a backlog.
    """

    kind = "audio"

    def __init__(self, prompt: MediaStreamTrack, inbound: MediaStreamTrack) -> None:
        super().__init__()
        self._prompt: MediaStreamTrack | None = prompt
        self._inbound = inbound
        self._drain = asyncio.create_task(self._discard_inbound())

    async def _discard_inbound(self) -> None:
        try:
            while True:
                await self._inbound.recv()
        except MediaStreamError:
            pass

    async def recv(self) -> av.AudioFrame:
        if self._prompt is not None:
            try:
                frame = await self._prompt.recv()
                assert isinstance(frame, av.AudioFrame)
                return frame
            except MediaStreamError:
                self._prompt = None
                self._drain.cancel()
        frame = await self._inbound.recv()
        assert isinstance(frame, av.AudioFrame)
        return frame

    def stop(self) -> None:
        self._drain.cancel()
        super().stop()


class Silence(MediaStreamTrack):
    """Endless 20 ms frames of silence: what the caller hears while the AI's voice is held and
    no human audio is wired in (the sender paces it; RTP keeps flowing, so the trunk's media
    timers do not fire)."""

    kind = "audio"

    def __init__(self, rate: int = PROMPT_RATE) -> None:
        super().__init__()
        self._rate = rate
        self._step = rate * FRAME_MS // 1000
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, self._step), np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = self._rate
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, self._rate)
        self._pts += self._step
        return frame

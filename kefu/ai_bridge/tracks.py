"""The agent's two media seams: the bot's voice as a track, and a tap on the caller's track.

:class:`BotAudioTrack` runs at one fixed rate, 22050 Hz, because both embedded voices (piper
and espeak-ng) synthesise at 22050 Hz: the common path then queues TTS audio untouched and the
only conversion is the one the sender does anyway (to 8 kHz for G.711, 48 kHz for Opus). A
chunk at any other rate (a production TTS server) is resampled once, as a whole, on entry.

Frames are 20 ms of s16 mono; when nothing is queued (or output is paused) the track returns
silence so RTP keeps flowing. ``paced=True`` (the default) makes ``recv`` wait for each frame's
due time like aiortc's own tracks, which aiortc's sender needs; kefu's ``RtpSender`` pulls at
real time itself, so either setting works there.

Marks: ``put(..., mark=x)`` tags the first sample of a segment; when the frame holding it is
handed to the sender, ``on_mark(x, now)`` is called. The agent uses that for the "first packet
on the wire" of a turn and for "this turn's audio has been played" (a zero-length segment).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import av
import numpy as np
import structlog
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from numpy.typing import NDArray

from kefu.codecs.resample import StreamResampler, resample
from kefu.rtp.taps import FrameTaps

__all__ = ["OUTPUT_RATE", "BotAudioTrack", "CallerAudioTap", "frame_to_mono_s16"]

log = structlog.get_logger(__name__)

OUTPUT_RATE = 22050
"""Rate of :class:`BotAudioTrack` (the native rate of both embedded voices)."""

_FRAME_MS = 20
# A consumer this far behind the pacing clock is re-anchored rather than served a burst.
_MAX_LAG_S = 0.1


@dataclass(slots=True)
class _Segment:
    pcm: NDArray[np.int16]
    offset: int
    mark: object | None


class BotAudioTrack(MediaStreamTrack):
    """Bounded queue of bot speech emitted as paced 20 ms frames, silence when idle."""

    kind = "audio"

    def __init__(
        self,
        *,
        sample_rate: int = OUTPUT_RATE,
        max_queued_s: float = 30.0,
        paced: bool = True,
        on_mark: Callable[[object, float], None] | None = None,
        on_frame: Callable[[NDArray[np.int16], int], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * _FRAME_MS // 1000
        self.max_queued = int(max_queued_s * sample_rate)
        self.paced = paced
        self.on_mark = on_mark
        self.on_frame = on_frame
        """Sees every frame handed to the sender (the echo canceller's far end)."""
        self._clock = clock
        self._segments: deque[_Segment] = deque()
        self._queued = 0
        self._paused = False
        self._room = asyncio.Event()
        self._room.set()
        self._pts = 0
        self._anchor: float | None = None
        self._time_base = fractions.Fraction(1, sample_rate)
        self.taps = FrameTaps()
        """Extra listeners of what the caller hears from the bot (:mod:`kefu.rtp.taps`)."""
        self.frames_sent = 0
        """Frames handed out, silence included."""
        self.speech_frames = 0
        """Frames that carried queued audio."""
        self.dropped_samples = 0
        """Samples refused by ``put_nowait`` because the queue was full."""
        self.flushed_samples = 0
        """Samples thrown away by ``flush`` (barge-in)."""
        self.last_speech_at: float | None = None
        """Time the last frame carrying queued audio was handed out."""

    # -- producer side ---------------------------------------------------------------------

    @property
    def queued_samples(self) -> int:
        return self._queued

    @property
    def queued_ms(self) -> float:
        return 1000.0 * self._queued / self.sample_rate

    @property
    def queued_s(self) -> float:
        """Seconds of audio queued: audio put now starts playing this much later (held
        longer while paused). The avatar places its lip-sync with it."""
        return self._queued / self.sample_rate

    def media_s(self, now: float) -> float:
        """The bot audio's media clock (pts / rate) at loop time ``now``; 0 before the first
        frame. Read-only (the avatar's frame timestamps)."""
        return 0.0 if self._anchor is None else max(0.0, now - self._anchor)

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def speaking(self) -> bool:
        """Audio is queued and not held."""
        return self._queued > 0 and not self._paused

    def _prepare(self, pcm: NDArray[np.int16], sample_rate: int) -> NDArray[np.int16]:
        mono = np.asarray(pcm, dtype=np.int16).reshape(-1)
        if sample_rate != self.sample_rate and mono.size:
            mono = resample(mono, sample_rate, self.sample_rate)
        return mono

    def put_nowait(
        self, pcm: NDArray[np.int16], sample_rate: int, *, mark: object | None = None
    ) -> bool:
        """Queue audio; False (and counted in ``dropped_samples``) when it does not fit."""
        data = self._prepare(pcm, sample_rate)
        if self._queued and self._queued + len(data) > self.max_queued:
            self.dropped_samples += len(data)
            log.warning("bot_audio_dropped", samples=len(data), dropped=self.dropped_samples)
            return False
        self._append(data, mark)
        return True

    async def put(
        self, pcm: NDArray[np.int16], sample_rate: int, *, mark: object | None = None
    ) -> None:
        """Queue audio, waiting while the queue is full (synthesis must not race ahead)."""
        data = self._prepare(pcm, sample_rate)
        # A segment larger than the whole budget is still accepted into an empty queue.
        while self._queued and self._queued + len(data) > self.max_queued:
            self._room.clear()
            await self._room.wait()
        self._append(data, mark)

    def _append(self, data: NDArray[np.int16], mark: object | None) -> None:
        if data.size == 0 and mark is None:
            return
        self._segments.append(_Segment(data, 0, mark))
        self._queued += len(data)

    def flush(self) -> int:
        """Drop everything queued at once (marks included); returns the samples dropped."""
        dropped = self._queued
        self._segments.clear()
        self._queued = 0
        self.flushed_samples += dropped
        self._room.set()
        return dropped

    def pause(self) -> None:
        """Hold the queue: silence goes out, nothing is dropped."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    # -- consumer side ---------------------------------------------------------------------

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return asyncio.get_running_loop().time()

    async def _pace(self) -> None:
        now = self._now()
        if self._anchor is None:
            self._anchor = now
            return
        due = self._anchor + self._pts / self.sample_rate
        wait = due - now
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -_MAX_LAG_S:
            self._anchor = now - self._pts / self.sample_rate

    def _take(self, now: float) -> tuple[NDArray[np.int16] | None, list[object]]:
        """The next frame of queued audio (None when idle) and the marks it crossed."""
        marks: list[object] = []
        if self._paused or not self._segments:
            return None, marks
        out = np.zeros(self.frame_samples, np.int16)
        filled = 0
        while self._segments and filled < self.frame_samples:
            seg = self._segments[0]
            if seg.offset == 0 and seg.mark is not None:
                marks.append(seg.mark)
                seg.mark = None
            n = min(self.frame_samples - filled, len(seg.pcm) - seg.offset)
            out[filled : filled + n] = seg.pcm[seg.offset : seg.offset + n]
            filled += n
            seg.offset += n
            if seg.offset >= len(seg.pcm):
                self._segments.popleft()
        self._queued -= filled
        if self._queued <= self.max_queued // 2:
            self._room.set()
        if filled == 0:
            return None, marks  # only zero-length marker segments were due
        return out, marks

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self.paced:
            await self._pace()
        if self.readyState != "live":
            raise MediaStreamError
        now = self._now()
        pcm, marks = self._take(now)
        if pcm is None:
            pcm = np.zeros(self.frame_samples, np.int16)
        else:
            self.speech_frames += 1
            self.last_speech_at = now
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        frame.time_base = self._time_base
        self._pts += self.frame_samples
        self.frames_sent += 1
        if self.on_frame is not None:
            self.on_frame(pcm, self.sample_rate)
        if self.taps:
            self.taps.push(frame)
        if marks and self.on_mark is not None:
            for mark in marks:
                self.on_mark(mark, now)
        return frame

    def stop(self) -> None:
        self.flush()
        super().stop()
        self.taps.stop()


def frame_to_mono_s16(frame: av.AudioFrame) -> NDArray[np.int16]:
    """Any PyAV audio frame (packed or planar, int or float, any channels) → mono int16."""
    data = frame.to_ndarray()
    channels = len(frame.layout.channels)
    if frame.format.is_planar:
        samples = data.reshape(channels, -1)
    else:
        samples = data.reshape(-1, channels).T
    if np.issubdtype(samples.dtype, np.floating):
        mono_f = samples.mean(axis=0) if channels > 1 else samples[0]
        out: NDArray[np.int16] = np.clip(mono_f * 32768.0, -32768, 32767).astype(np.int16)
        return out
    if samples.dtype != np.int16:
        # s32 and friends: keep the top 16 bits.
        shift = 8 * samples.dtype.itemsize - 16
        samples = (samples.astype(np.int64) >> shift).astype(np.int16)
    if channels > 1:
        mixed: NDArray[np.int16] = samples.astype(np.int32).mean(axis=0).astype(np.int16)
        return mixed
    return np.ascontiguousarray(samples[0], dtype=np.int16)


class CallerAudioTap:
    """Reads the caller's track (any rate/layout) and hands 16 kHz int16 to ``sink``.

    ``sink(pcm16k, now)`` runs on the event loop with ``now`` from ``clock`` (the loop's time
    by default), i.e. the time the last sample of that audio arrived. The task exits cleanly
    when the track ends (MediaStreamError) or on :meth:`stop`.

    ``frontend`` (optional, e.g. :class:`kefu.ai_bridge.frontend.CallerFrontEnd`) is awaited
    with each 16 kHz chunk before ``sink`` and returns the cleaned audio (denoised, echo
    cancelled); it does its CPU work off the loop. Without it audio goes to ``sink`` untouched.
    """

    def __init__(
        self,
        track: MediaStreamTrack,
        sink: Callable[[NDArray[np.int16], float], None],
        *,
        clock: Callable[[], float] | None = None,
        call_id: str | None = None,
        frontend: Callable[[NDArray[np.int16]], Awaitable[NDArray[np.int16]]] | None = None,
    ) -> None:
        self.track = track
        self.sink = sink
        self.frontend = frontend
        self._clock = clock
        self._resampler: StreamResampler | None = None
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(call_id=call_id)
        self.frames = 0
        self.ended = asyncio.Event()

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="caller-tap")
        return self._task

    def _convert(self, frame: av.AudioFrame) -> list[NDArray[np.int16]]:
        rate = int(frame.sample_rate)
        if self._resampler is None or self._resampler.in_rate != rate:
            self._resampler = StreamResampler(rate, 16000)
        return self._resampler.process(frame_to_mono_s16(frame))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        try:
            while True:
                try:
                    frame = await self.track.recv()
                except MediaStreamError:
                    self._log.info("caller_track_ended", frames=self.frames)
                    return
                if not isinstance(frame, av.AudioFrame):
                    continue
                self.frames += 1
                for pcm in self._convert(frame):
                    if self.frontend is not None:
                        pcm = await self.frontend(pcm)
                        if not pcm.size:
                            continue
                    self.sink(pcm, clock())
        finally:
            self.ended.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

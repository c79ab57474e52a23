"""Copies of a track's frames for extra listeners, without touching its main consumer.

A track that others may want to hear as well (the caller's decoded audio, the bot's voice)
owns a :class:`FrameTaps` and calls :meth:`FrameTaps.push` with every frame it hands to its
consumer. :meth:`FrameTaps.open` returns a :class:`TapTrack`: an aiortc track that yields those
frames in order. The main consumer never waits for a tap: each tap is a bounded queue that
drops its oldest frame when its reader falls behind (``dropped`` counts them). With no tap
open, ``push`` costs one truth test.

Frames are shared, not copied: a tap's reader must not modify them (encoders and mixers
only read).
"""

from __future__ import annotations

import asyncio
from collections import deque

import av
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

TAP_FRAMES = 25
"""Frames a tap holds before it drops the oldest (500 ms of 20 ms frames)."""


class TapTrack(MediaStreamTrack):
    """One listener's copy of a track (see the module's doc)."""

    kind = "audio"

    def __init__(self, taps: FrameTaps, limit: int) -> None:
        super().__init__()
        self._taps: FrameTaps | None = taps
        self._frames: deque[av.AudioFrame] = deque(maxlen=limit)
        self._ready = asyncio.Event()
        self.dropped = 0

    def put(self, frame: av.AudioFrame) -> None:
        if len(self._frames) == self._frames.maxlen:
            self.dropped += 1
        self._frames.append(frame)
        self._ready.set()

    async def recv(self) -> av.AudioFrame:
        while not self._frames:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        return self._frames.popleft()

    def stop(self) -> None:
        super().stop()
        self._ready.set()  # a reader waiting in recv() sees the end
        if self._taps is not None:
            self._taps.close(self)
            self._taps = None


class FrameTaps:
    """The open taps of one track."""

    def __init__(self) -> None:
        self._open: list[TapTrack] = []

    def __bool__(self) -> bool:
        return bool(self._open)

    def open(self, limit: int = TAP_FRAMES) -> TapTrack:
        tap = TapTrack(self, limit)
        self._open.append(tap)
        return tap

    def close(self, tap: TapTrack) -> None:
        if tap in self._open:
            self._open.remove(tap)

    def push(self, frame: av.AudioFrame) -> None:
        for tap in self._open:
            tap.put(frame)

    def stop(self) -> None:
        """The source ended: every tap ends too."""
        for tap in list(self._open):
            tap.stop()

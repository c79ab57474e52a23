"""Mixing for participants that need one stream (a SIP leg, the AI agent), and the reverse:
publishing an arbitrary decoded track into a room as Opus packets.

:class:`AudioMixer` subscribes to the room's :class:`~kefu.sfu.forward.PacketSource` objects
like any forwarding subscriber, decodes each with its own libopus decoder (PLC for gaps),
sums them in int32 and applies a peak limiter, producing 20 ms mono s16 frames at 48 kHz,
paced by the wall clock the way aiortc's ``AudioStreamTrack`` is. Per source it keeps a small
PCM buffer: playback of a source starts once two frames (40 ms) are there, and a buffer that
grows past ``max_buffer_ms`` loses its oldest audio (counted), so a bursty source cannot add
latency to the mix.

A mix for a listener that is not a loudspeaker (the AI recognising the caller) is
``prompt``: a frame goes as soon as every sounding input has its next 20 ms, instead of on
the next clock tick after two frames were buffered, so the caller's audio reaches the VAD
when it arrives (40-60 ms sooner than a paced mix). The clock still rules where audio is
missing: a late packet is waited for at most ``PROMPT_GRACE_S`` past its due time, then
concealed; with no input sounding, frames of silence go at real-time pace.

:class:`LocalPublisher` reads a ``MediaStreamTrack`` of any rate/layout, resamples it to mono
48 kHz 20 ms frames, encodes them once with Opus and publishes the packets, so every
subscriber of that source gets them forwarded without further encoding.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from numpy.typing import NDArray

from kefu.codecs.opus import OpusDecoder, OpusEncoder
from kefu.errors import CodecError
from kefu.rtp.taps import FrameTaps
from kefu.sfu.forward import DropOldest, OpusPacket, PacketSource, QueueClosed, mono_frame

RATE = 48000
FRAME = 960  # 20 ms at 48 kHz
START_FRAMES = 2
STALE_READ_S = 0.2
"""A mix not read for this long starts afresh: its inputs' queued audio is dropped."""
PROMPT_GRACE_S = 0.03
"""A prompt mix waits this long past a frame's due time for a sounding input's late packet."""


@dataclass(slots=True)
class MixerStats:
    """Counters of one mixer."""

    frames: int = 0
    decoded: int = 0
    decode_errors: int = 0
    concealed: int = 0
    trimmed_samples: int = 0
    limited_frames: int = 0


class _Input:
    """One source as the mixer sees it: queue of packets, decoder, PCM buffer."""

    def __init__(self, queue: DropOldest[OpusPacket]) -> None:
        self.queue = queue
        self.decoder = OpusDecoder()
        self.pcm: NDArray[np.int16] = np.zeros(0, np.int16)
        self.playing = False
        self.ended = False


class RealTimePacer:
    """The pts of consecutive ``frame``-sample frames, each released at real-time pace.

    The first frame goes at once, frame n at n * frame / rate seconds after it: due times
    come from the start, so a late wake-up does not push every later frame back (aiortc's
    ``AudioStreamTrack`` paces the same way).
    """

    def __init__(self, frame: int = FRAME, rate: int = RATE) -> None:
        self.frame = frame
        self.rate = rate
        self.pts = 0
        self._start: float | None = None

    def resync(self) -> None:
        """Pace from now on (after a pause in reading) instead of catching up at once."""
        if self._start is not None:
            self._start = time.monotonic() - (self.pts + self.frame) / self.rate

    async def next_pts(self) -> int:
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self.pts += self.frame
            delay = self._start + self.pts / self.rate - now
            if delay > 0:
                await asyncio.sleep(delay)
        return self.pts

    def due_in(self) -> float:
        """Seconds until the next frame is due (<= 0: due now; the first one is due at once)."""
        if self._start is None:
            return 0.0
        return self._start + (self.pts + self.frame) / self.rate - time.monotonic()

    def take_now(self, *, follow: bool) -> int:
        """The next pts, released now. With ``follow`` the clock moves to this frame (later
        frames are due from now on, whether it came early or late); without, it keeps its
        origin, as :meth:`next_pts` does."""
        now = time.monotonic()
        if self._start is None:
            self._start = now
            return self.pts
        self.pts += self.frame
        if follow:
            self._start = now - self.pts / self.rate
        return self.pts


class AudioMixer(MediaStreamTrack):
    """Sum of every added source, 20 ms mono frames at 48 kHz (see module doc)."""

    kind = "audio"

    def __init__(self, *, max_buffer_ms: int = 200, prompt: bool = False) -> None:
        super().__init__()
        self.stats = MixerStats()
        self._inputs: dict[str, tuple[PacketSource, _Input]] = {}
        self._max_buffer = RATE * max_buffer_ms // 1000
        self._pacer = RealTimePacer()
        self._prompt = prompt
        self._start_frames = 1 if prompt else START_FRAMES
        self._arrived = asyncio.Event()
        self._gain = 1.0
        self._last_read: float | None = None
        self.taps = FrameTaps()
        """Extra listeners of the mix (the AI transcribing an agent); :mod:`kefu.rtp.taps`."""

    def add_source(self, key: str, source: PacketSource) -> None:
        self.remove_source(key)
        notify = self._arrived.set if self._prompt else None
        self._inputs[key] = (source, _Input(source.subscribe(notify=notify)))

    def remove_source(self, key: str) -> None:
        entry = self._inputs.pop(key, None)
        if entry is not None:
            entry[0].unsubscribe(entry[1].queue)

    @property
    def source_keys(self) -> list[str]:
        return list(self._inputs)

    def stop(self) -> None:
        for key in list(self._inputs):
            self.remove_source(key)
        super().stop()
        self.taps.stop()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._stale():
            # Nobody read the mix yet, or for a while (a phone call's agent room before a
            # takeover): what the inputs queued meanwhile is old. Start from what arrives now,
            # rather than replay it and stay that far behind for the rest of the call.
            self._pacer.resync()
            for _, inp in self._inputs.values():
                self._drain(inp)
                inp.pcm = np.zeros(0, np.int16)
                inp.playing = False
        pts = await (self._prompt_pts() if self._prompt else self._pacer.next_pts())
        self._last_read = time.monotonic()
        batches = [(entry[1], self._drain(entry[1])) for entry in self._inputs.values()]
        loop = asyncio.get_running_loop()
        # decoding and summing are CPU work: keep them off the event loop
        pcm = await loop.run_in_executor(None, self._mix, batches)
        if self.readyState != "live":
            raise MediaStreamError
        self.stats.frames += 1
        frame = mono_frame(pcm, pts, RATE)
        if self.taps:
            self.taps.push(frame)
        return frame

    async def _prompt_pts(self) -> int:
        """The next frame's pts, as soon as every sounding input has that frame, at the latest
        when it is due (plus a grace for a late packet while an input is sounding). The clock
        follows audio that arrived or was waited for; silence alone keeps real-time pace."""
        while not self._ready():
            playing = any(inp.playing and not inp.ended for _, inp in self._inputs.values())
            wait = self._pacer.due_in() + (PROMPT_GRACE_S if playing else 0.0)
            if wait <= 0:
                return self._pacer.take_now(follow=playing)
            self._arrived.clear()
            if self._ready():
                break
            try:
                await asyncio.wait_for(self._arrived.wait(), wait)
            except TimeoutError:
                return self._pacer.take_now(follow=playing)
        return self._pacer.take_now(follow=True)

    def _ready(self) -> bool:
        """Every sounding input holds its next frame, and at least one input holds audio."""
        held = False
        for _, inp in self._inputs.values():
            has = inp.pcm.size >= FRAME or len(inp.queue) > 0
            if inp.playing and not inp.ended and not has:
                return False
            held = held or has
        return held

    def _stale(self) -> bool:
        last = self._last_read
        return last is None or time.monotonic() - last > STALE_READ_S

    @staticmethod
    def _drain(inp: _Input) -> list[OpusPacket]:
        packets: list[OpusPacket] = []
        while True:
            try:
                packet = inp.queue.get_nowait()
            except QueueClosed:
                inp.ended = True
                break
            if packet is None:
                break
            packets.append(packet)
        return packets

    def _mix(self, batches: list[tuple[_Input, list[OpusPacket]]]) -> NDArray[np.int16]:
        total = np.zeros(FRAME, np.int32)
        for inp, packets in batches:
            total += self._take(inp, packets)
        peak = int(np.max(np.abs(total))) if total.size else 0
        target = 1.0 if peak <= 32767 else 32767.0 / peak
        # attack at once, release slowly: avoids both clipping and audible pumping
        self._gain = target if target < self._gain else min(target, self._gain + 0.02)
        if self._gain < 1.0:
            self.stats.limited_frames += 1
            total = (total * self._gain).astype(np.int32)
        return np.clip(total, -32768, 32767).astype(np.int16)

    def _take(self, inp: _Input, packets: list[OpusPacket]) -> NDArray[np.int16]:
        parts = [inp.pcm] if inp.pcm.size else []
        for packet in packets:
            try:
                parts.append(inp.decoder.decode(packet.payload))
                self.stats.decoded += 1
            except CodecError:
                self.stats.decode_errors += 1
        pcm = np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else inp.pcm)
        if pcm.size > self._max_buffer:
            self.stats.trimmed_samples += pcm.size - self._max_buffer
            pcm = pcm[-self._max_buffer :]
        if not inp.playing and pcm.size >= self._start_frames * FRAME:
            inp.playing = True
        if not inp.playing:
            inp.pcm = pcm
            return np.zeros(FRAME, np.int32)
        if pcm.size < FRAME:
            if not inp.ended and pcm.size == 0:
                self.stats.concealed += 1
                filler = inp.decoder.conceal(FRAME)
            else:
                filler = np.zeros(FRAME - pcm.size, np.int16)
            pcm = np.concatenate((pcm, filler))
            inp.playing = False  # rebuffer after an underrun
        inp.pcm = pcm[FRAME:]
        return pcm[:FRAME].astype(np.int32)


class LocalPublisher:
    """Encode a decoded track once into Opus and publish it to a :class:`PacketSource`."""

    def __init__(self, track: MediaStreamTrack, source: PacketSource) -> None:
        self._track = track
        self._source = source
        self._encoder = OpusEncoder(bitrate=32000, channels=1)
        self._resampler: Any = av.AudioResampler(
            format="s16", layout="mono", rate=RATE, frame_size=FRAME
        )
        self._timestamp = 0
        self.frames_encoded = 0
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                frame = await self._track.recv()
                if not isinstance(frame, av.AudioFrame):
                    continue
                for out in self._resampler.resample(frame):
                    pcm = out.to_ndarray().reshape(-1)
                    if pcm.size != FRAME:
                        continue
                    payload = await loop.run_in_executor(None, self._encoder.encode, pcm)
                    self._source.publish(payload, self._timestamp & 0xFFFFFFFF)
                    self._timestamp += FRAME
                    self.frames_encoded += 1
        except MediaStreamError:
            pass
        finally:
            self._source.close()

    async def stop(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        self._track.stop()

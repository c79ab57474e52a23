"""The caller's audio of an RTP leg as a track (the paced sender: :mod:`kefu.rtp.sender`).

API CONTRACT:

    RtpInboundTrack(clock=None, *, prompt=False)    MediaStreamTrack, kind "audio"
        .configure(codec: CodecInfo, ptime_ms=20)   (re)build decoder and jitter buffer
        .push(packet: AudioPacket)                  from the endpoint's receive path
        await .recv() -> av.AudioFrame              s16, mono, codec sample rate, ptime long,
                                                    pts in samples, time_base 1/sample_rate
        .prompt: bool                               release frames as they arrive (below)
        .frames_concealed, .frames_skipped, .decode_errors

Timing model. Both sides run on the event loop's monotonic clock, one frame per ptime:

* recv() waits for the first packet of the call (no silence before the caller speaks),
  then emits a frame every ptime whether or not a packet came: lost or late audio is
  concealed on time, so downstream stages (VAD, ASR, echo) see a steady clock. A consumer
  that falls more than a few frames behind skips ahead instead of replaying old audio.
* ``prompt`` (for a recognizer: the AI's ear): no playout delay. A frame is released as soon
  as its packet is in hand, and the clock follows it (the next frame is due one ptime
  later); a missing frame is waited for PROMPT_GRACE_S past its due time, then concealed,
  so a silent sender still yields frames at real-time pace. The jitter buffer's target
  delay (40 ms at least once any jitter is seen) is what a loudspeaker needs to play
  smoothly; VAD and ASR do not, and the caller waits for every millisecond of it.
* The sender (:mod:`kefu.rtp.sender`) sleeps until each slot's deadline.
* Echo (``play(inbound)``): inbound paces at exactly the rate the sender consumes, and the
  network/clock drift between the peer and us is absorbed (bounded, with drops counted) by
  the jitter buffer, so nothing accumulates.

Decoding and encoding run inline, no executor: G.711 costs ~2 µs a frame, Opus ~70 µs to
encode and ~20 µs to decode 20 ms (libopus via PyAV). tests/rtp/bench_rtp_echo.py measures
the whole echo path (socket to socket) at ~75 µs CPU per echoed packet for PCMU and ~230 µs
for Opus: 50 echoed calls take ~18 % / ~50 % of one core, and no callback blocks the loop
for longer than one Opus encode. An executor hop would cost more than the work it moves.
Several consumers of one inbound track must share it through aiortc's MediaRelay.

``clock`` defaults to the running loop's time(); tests pass a hand-driven one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
from collections.abc import Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from numpy.typing import NDArray

from kefu.codecs.jitter import JitterBuffer, Playout
from kefu.codecs.registry import CodecInfo, make_decoder
from kefu.errors import CodecError
from kefu.rtp.session import AudioPacket
from kefu.rtp.taps import FrameTaps

# A consumer more than this many frames late gets the current audio, not the backlog.
_MAX_CONSUMER_LAG = 3
PROMPT_GRACE_S = 0.03
"""How long past its due time a prompt track waits for a missing frame before concealing it."""


class RtpInboundTrack(MediaStreamTrack):
    """The remote party's audio, decoded and de-jittered, paced by the local clock."""

    kind = "audio"

    def __init__(self, clock: Callable[[], float] | None = None, *, prompt: bool = False) -> None:
        super().__init__()
        self._clock_fn = clock
        self._started = asyncio.Event()
        self._arrived = asyncio.Event()
        self.prompt = prompt
        """Release frames as their packets arrive (see the module doc); set before reading."""
        self._codec: CodecInfo | None = None
        self._ptime = 0.02
        self._deadline: float | None = None
        self._pts = 0
        self.frames_out = 0
        self.frames_concealed = 0
        self.frames_skipped = 0
        self.decode_errors = 0
        self.taps = FrameTaps()
        """Extra listeners of the decoded audio (a listening agent's room); :mod:`kefu.rtp.taps`."""

    def _clock(self) -> float:
        if self._clock_fn is None:
            self._clock_fn = asyncio.get_running_loop().time
        return self._clock_fn()

    def configure(self, codec: CodecInfo, ptime_ms: int = 20) -> None:
        """Set or change the codec (re-INVITE); audio already buffered is discarded."""
        if self._codec is not None and self._codec.sample_rate != codec.sample_rate:
            # Keep pts monotonic across the time-base change.
            self._pts = self._pts * codec.sample_rate // self._codec.sample_rate
        self._codec = codec
        self._ptime = ptime_ms / 1000
        self._samples = codec.frame_samples(ptime_ms)
        self._time_base = fractions.Fraction(1, codec.sample_rate)
        self._decoder = make_decoder(codec.name)
        self._jitter = JitterBuffer(codec.clock_rate, codec.rtp_timestamp_step(ptime_ms))

    @property
    def codec(self) -> CodecInfo | None:
        return self._codec

    @property
    def jitter_buffer(self) -> JitterBuffer | None:
        """The current jitter buffer (its stats count late, lost and overflowed packets)."""
        return self._jitter if self._codec is not None else None

    def push(self, packet: AudioPacket) -> None:
        """Queue one received packet for playout."""
        if self._codec is None or self.readyState != "live":
            return
        self._jitter.put(packet.seq, packet.timestamp, packet.payload, packet.arrival)
        self._arrived.set()
        if not self._started.is_set():
            self._started.set()

    def stop(self) -> None:
        super().stop()
        # Wake a recv() parked before the first packet so it can raise MediaStreamError.
        self._started.set()
        self.taps.stop()

    async def recv(self) -> av.AudioFrame:
        frame = self._frame(self._pcm_for(await self._next_playout()))
        if self.taps:
            self.taps.push(frame)
        return frame

    async def recv_payload(self) -> bytes | None:
        """The next frame still encoded, on the same clock as :meth:`recv`.

        For a sender using this track's codec (echo): it skips decode, frame objects and
        re-encode, the bulk of the per-packet cost. None means the frame was lost; the sender
        leaves the slot empty and the peer's jitter buffer conceals it, as a relay would.
        """
        playout = await self._next_playout()
        self._pts += self._samples
        self.frames_out += 1
        if playout is None or playout.payload is None:
            self.frames_concealed += 1
            return None
        return playout.payload

    async def _next_playout(self) -> Playout | None:
        """Wait for the next frame slot; None only once the stream runs (then: conceal)."""
        if self.prompt:
            return await self._next_prompt()
        while True:
            await self._until_started()
            now = self._clock()
            if self._deadline is None:
                self._deadline = now
            lag = now - self._deadline
            if lag < 0:
                await asyncio.sleep(-lag)
                if self.readyState != "live":
                    raise MediaStreamError
                now = self._clock()
            elif lag > _MAX_CONSUMER_LAG * self._ptime and self.frames_out:
                skipped = int(lag / self._ptime)
                for _ in range(skipped):
                    self._jitter.pop(now)
                self._deadline += skipped * self._ptime
                self._pts += skipped * self._samples
                self.frames_skipped += skipped
            self._deadline += self._ptime
            playout = self._jitter.pop(now)
            if playout is None and not self.frames_out:
                continue  # still filling to the target delay: the call has not started
            return playout

    async def _until_started(self) -> None:
        """Return once the first packet has come; MediaStreamError once the track ended."""
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            if self._started.is_set():
                return
            await self._started.wait()

    async def _next_prompt(self) -> Playout:
        """The next frame as soon as it is in hand, or concealed once overdue (module doc)."""
        while True:
            await self._until_started()
            now = self._clock()
            self._arrived.clear()
            if self._deadline is None or self._jitter.next_in_hand():
                self._deadline = now + self._ptime
                return self._jitter.pop_now()
            overdue = now - self._deadline
            if overdue >= PROMPT_GRACE_S:
                if overdue > _MAX_CONSUMER_LAG * self._ptime:
                    self._deadline = now  # a stalled reader: no burst of concealed frames
                self._deadline += self._ptime
                return self._jitter.pop_now()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), PROMPT_GRACE_S - overdue)

    def _pcm_for(self, playout: Playout | None) -> NDArray[np.int16]:
        if playout is not None and playout.payload is not None:
            try:
                pcm = self._decoder.decode(playout.payload)
            except CodecError:
                self.decode_errors += 1
            else:
                if pcm.size:
                    return pcm
                self.decode_errors += 1
        self.frames_concealed += 1
        return self._decoder.conceal(self._samples)

    def _frame(self, pcm: NDArray[np.int16]) -> av.AudioFrame:
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        assert self._codec is not None
        frame.sample_rate = self._codec.sample_rate
        frame.pts = self._pts
        frame.time_base = self._time_base
        self._pts += pcm.shape[-1]
        self.frames_out += 1
        return frame

"""The forwarding path: encoded Opus packets from a publisher to subscribers, untouched.

aiortc has no forwarding path: every ``RTCRtpReceiver`` runs each packet through a jitter
buffer (80 ms of audio held back), a decoder thread and an unbounded decoded-frame queue, and
every ``RTCRtpSender`` fed decoded frames re-encodes them (stereo 96 kbit/s) and computes an
audio level in pure Python. An SFU needs none of that for a subscriber that speaks Opus.

This module is the ONE seam over aiortc, in two halves:

* receive side, :func:`tap_receiver`: replaces, on one receiver *instance*, the coroutine
  ``_handle_rtp_packet`` that ``RTCDtlsTransport`` awaits for every decrypted RTP packet.
  The replacement hands the Opus payload to a :class:`PacketSource` and returns; aiortc's
  jitter buffer, decoder thread and frame queue never see the packet, so nothing is decoded
  and nothing accumulates unread. (Cost: aiortc sends no RTCP receiver-report blocks for a
  tapped stream; browsers do not need them for audio.)
* send side, :class:`EncodedTrack`: a ``MediaStreamTrack`` whose ``recv()`` returns
  ``av.Packet`` objects. ``RTCRtpSender`` already treats packets as pre-encoded: it calls
  ``encoder.pack(packet)`` (payload as-is, timestamp from ``pts``) instead of ``encode`` and
  skips its audio-level computation. Sequence numbers and SSRC stay the sender's own.

Between them, each subscriber owns a bounded :class:`DropOldest` queue: a slow subscriber
loses its oldest packets (counted), never the publisher's or anyone else's.
Where a subscriber negotiated something other than Opus, :class:`EncodedTrack` decodes and
returns frames so aiortc transcodes for that subscriber only.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCRtpReceiver, RTCRtpTransceiver
from aiortc.mediastreams import MediaStreamError
from numpy.typing import NDArray

from kefu.codecs.opus import OpusDecoder
from kefu.errors import CodecError

OPUS_RATE = 48000
OPUS_TIME_BASE = fractions.Fraction(1, OPUS_RATE)
T = TypeVar("T")


class QueueClosed(Exception):
    """The queue was closed: the publisher or subscriber went away."""


class DropOldest(Generic[T]):
    """Bounded FIFO for one consumer; when full, ``put`` discards the oldest item (counted)."""

    def __init__(self, maxlen: int, *, notify: Callable[[], None] | None = None) -> None:
        if maxlen < 1:
            raise ValueError("DropOldest: maxlen must be >= 1")
        self._items: deque[T] = deque()
        self._maxlen = maxlen
        self._waiter: asyncio.Future[None] | None = None
        self._notify = notify
        """Called after every put and on close (a consumer that waits on several queues)."""
        self._closed = False
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> bool:
        """Queue ``item``; True when that pushed the oldest item out."""
        if self._closed:
            return False
        dropped = len(self._items) >= self._maxlen
        if dropped:
            self._items.popleft()
            self.dropped += 1
        self._items.append(item)
        self._wake()
        return dropped

    def get_nowait(self) -> T | None:
        if self._items:
            return self._items.popleft()
        if self._closed:
            raise QueueClosed
        return None

    async def get(self) -> T:
        while not self._items:
            if self._closed:
                raise QueueClosed
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self._notify is not None:
            self._notify()


@dataclass(frozen=True, slots=True)
class OpusPacket:
    """One Opus RTP payload as it travels through the room."""

    payload: bytes
    """RFC 7587 §4.2: the RTP payload is exactly one Opus packet (RFC 6716 §3)."""
    timestamp: int
    """RFC 3550 §5.1 timestamp at 48 kHz (RFC 7587 §4.1), unwrapped to 64 bits by the source."""


@dataclass(slots=True)
class SfuCounters:
    """Totals of one :class:`~kefu.sfu.api.Sfu` since it started; they only grow (metrics)."""

    packets_forwarded: int = 0
    """Opus packets handed to a subscriber's sender untouched."""
    packets_transcoded: int = 0
    """Packets decoded for a subscriber that negotiated another codec."""
    packets_dropped: int = 0
    """Packets pushed out of a full subscriber queue (a slow subscriber or mixer)."""
    participants_joined: int = 0
    """Joins (peer-connection and local participants)."""
    participants_left: int = 0
    """Leaves, however they happened (leave(), failed connection, sweep, shutdown)."""
    transcoded_streams: int = 0
    """Subscriptions that switched to decoding because the subscriber has no Opus."""


@dataclass(slots=True)
class SourceStats:
    """Counters of one published audio source (for tests and metrics)."""

    received: int = 0
    rejected: int = 0
    fanned_out: int = 0
    dropped: int = 0
    muted: int = 0
    """Packets held back because the publisher does not have the floor (silent listening)."""


class PacketSource:
    """Fan-out hub of one published Opus stream: each subscriber gets its own bounded queue."""

    def __init__(
        self,
        owner_id: str,
        *,
        queue_len: int = 50,
        clock: Callable[[], float],
        counters: SfuCounters | None = None,
    ) -> None:
        self.owner_id = owner_id
        self.stats = SourceStats()
        self._counters = counters
        self.last_packet_at: float | None = None
        self._queue_len = queue_len
        self._clock = clock
        self._subscribers: list[DropOldest[OpusPacket]] = []
        self._last_ts: int | None = None
        self._closed = False
        self.muted = False
        """While set, packets are received (the publisher is alive) but reach nobody."""

    def subscribe(self, *, notify: Callable[[], None] | None = None) -> DropOldest[OpusPacket]:
        queue: DropOldest[OpusPacket] = DropOldest(self._queue_len, notify=notify)
        if self._closed:
            queue.close()
        else:
            self._subscribers.append(queue)
        return queue

    def unsubscribe(self, queue: DropOldest[OpusPacket]) -> None:
        if queue in self._subscribers:
            self._subscribers.remove(queue)
        queue.close()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, payload: bytes, rtp_timestamp: int) -> None:
        if self._closed:
            return
        self.stats.received += 1
        self.last_packet_at = self._clock()
        if not payload:
            self.stats.rejected += 1
            return
        if self.muted:
            self.stats.muted += 1
            return
        # unwrap the 32-bit RTP clock so subscribers see a monotonic pts
        if self._last_ts is None:
            ts = rtp_timestamp
        else:
            delta = (rtp_timestamp - self._last_ts) & 0xFFFFFFFF
            if delta >= 0x80000000:
                delta -= 0x100000000
            ts = self._last_ts + delta
        self._last_ts = ts
        packet = OpusPacket(payload, ts)
        dropped = 0
        for queue in self._subscribers:
            dropped += queue.put(packet)
        self.stats.fanned_out += len(self._subscribers)
        if dropped:
            self.stats.dropped += dropped
            if self._counters is not None:
                self._counters.packets_dropped += dropped

    def close(self) -> None:
        self._closed = True
        for queue in self._subscribers:
            queue.close()
        self._subscribers.clear()


RtpHook = Callable[[Any, int], Awaitable[None]]


def tap_receiver(
    receiver: RTCRtpReceiver, transceiver: RTCRtpTransceiver, source: PacketSource | None
) -> None:
    """Route ``receiver``'s RTP to ``source`` instead of aiortc's decoder (see module doc).

    ``source=None`` discards the stream without decoding it (a participant's second audio or
    video track; its first video track is decoded and republished, :mod:`.camera`).
    """

    # The payload-type map is only known once negotiation finished (and changes with
    # renegotiation), so it is looked up late, but rebuilt only when aiortc replaces it:
    # this runs for every packet of every publisher.
    seen: list[Any] = [None]
    opus: set[int] = set()

    async def handle_rtp_packet(packet: Any, arrival_time_ms: int) -> None:
        if source is None:
            return
        codecs = getattr(transceiver, "_codecs", None)
        if codecs is not seen[0]:
            seen[0] = codecs
            opus.clear()
            opus.update(c.payloadType for c in codecs or () if c.mimeType.lower() == "audio/opus")
        if packet.payload_type not in opus:
            source.stats.rejected += 1
            return
        source.publish(packet.payload, packet.timestamp)

    # instance attribute shadows the method that RTCDtlsTransport awaits per packet
    receiver._handle_rtp_packet = handle_rtp_packet  # type: ignore[method-assign]


@dataclass(slots=True)
class SubscriptionStats:
    """Counters of one subscriber's view of one source."""

    forwarded: int = 0
    transcoded: int = 0
    decode_errors: int = 0
    mode: str = "pending"
    dropped_by: list[DropOldest[OpusPacket]] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return sum(q.dropped for q in self.dropped_by)


class EncodedTrack(MediaStreamTrack):
    """Audio track that yields the publisher's Opus packets as ``av.Packet`` (see module doc).

    ``negotiated`` returns the mime type the subscriber's sender negotiated (None until
    known); anything but Opus switches this track to decoding, once, at the first packet.
    """

    kind = "audio"

    def __init__(
        self,
        queue: DropOldest[OpusPacket],
        negotiated: Callable[[], str | None],
        on_stop: Callable[[], None] | None = None,
        counters: SfuCounters | None = None,
    ) -> None:
        super().__init__()
        self._queue = queue
        self._counters = counters if counters is not None else SfuCounters()
        self._negotiated = negotiated
        self._on_stop = on_stop
        self._origin: int | None = None
        self._decoder: OpusDecoder | None = None
        self.stats = SubscriptionStats(dropped_by=[queue])

    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        while True:
            try:
                packet = await self._queue.get()
            except QueueClosed:
                self.stop()
                raise MediaStreamError from None
            if self._origin is None:
                self._origin = packet.timestamp
                mime = (self._negotiated() or "audio/opus").lower()
                self.stats.mode = "forward" if mime == "audio/opus" else "transcode"
                if self.stats.mode == "transcode":
                    self._decoder = OpusDecoder()
                    self._counters.transcoded_streams += 1
            pts = packet.timestamp - self._origin
            if self._decoder is None:
                out = av.Packet(packet.payload)
                out.pts = pts
                out.time_base = OPUS_TIME_BASE
                self.stats.forwarded += 1
                self._counters.packets_forwarded += 1
                return out
            try:
                pcm = self._decoder.decode(packet.payload)
            except CodecError:
                self.stats.decode_errors += 1
                continue
            frame = mono_frame(pcm, pts)
            self.stats.transcoded += 1
            self._counters.packets_transcoded += 1
            return frame

    def stop(self) -> None:
        if self.readyState == "live" and self._on_stop is not None:
            self._on_stop()
        super().stop()


def mono_frame(pcm: NDArray[np.int16], pts: int, sample_rate: int = OPUS_RATE) -> av.AudioFrame:
    """Mono s16 samples as an ``av.AudioFrame`` stamped ``pts`` (in 1/``sample_rate`` s)."""
    frame = av.AudioFrame.from_ndarray(
        np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16", layout="mono"
    )
    frame.sample_rate = sample_rate
    frame.pts = pts
    frame.time_base = (
        OPUS_TIME_BASE if sample_rate == OPUS_RATE else fractions.Fraction(1, sample_rate)
    )
    return frame


def monotonic() -> float:
    return time.monotonic()

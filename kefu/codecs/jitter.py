"""Adaptive audio jitter buffer, payload level and codec agnostic (sans-IO).

The producer calls :meth:`JitterBuffer.put` for every RTP packet with its arrival time; the
consumer calls :meth:`JitterBuffer.pop` once per frame period and decodes (or conceals) what
it gets. No clocks are read: callers pass times in, so tests drive it by hand.

States (the only transitions; anything else is a bug and raises InvalidTransition)::

    idle      --ready-->     playing     first packets buffered up to the target delay
    playing   --underrun-->  buffering   nothing left at or after the playout point
    buffering --ready-->     playing     refilled to the target delay
    playing   --resync-->    buffering   the sender restarted (sequence/timestamp jump)
    buffering --resync-->    buffering
    idle      --resync-->    idle

Invariants:

* while ``playing`` every buffered timestamp is >= the playout point ``next_ts``; a packet
  older than that is late and never buffered;
* at most ``capacity`` packets are buffered; the oldest is dropped first, and counted;
* :meth:`pop` returns None only in ``idle``; afterwards it always returns a
  :class:`Playout`, whose payload None means "conceal one frame";
* sequence numbers and timestamps are kept "extended" (unwrapped past 2**16 and 2**32), and
  reported back modulo 2**32.

Adaptation: the target delay is ``frame + max(3 * jitter, peak)`` clamped to
[min_delay, max_delay], where jitter is RFC 3550 §6.4.1/A.8 interarrival jitter and peak is
the largest recent delay above the fastest packet's, forgotten with a 5 s time constant.
The RFC estimate is a mean deviation: alone it underestimates periodic delay spikes (Wi-Fi
scans, bufferbloat bursts), and the buffer would underrun on every spike.

Prompt playout (:meth:`JitterBuffer.pop_now`, for a recognizer): no target delay; a frame
plays as soon as it is in hand, and the consumer decides when a missing one is concealed.

The buffer *grows* by holding the playout point for one period (the consumer conceals a
frame) and *shrinks* by discarding the oldest frame.
Without the decoded audio we cannot pick a quiet moment, so we choose "any moment" but at most
one step every ``_ADAPT_INTERVAL`` frames, so that each step is a single, isolated 20 ms
glitch; only when the level exceeds ``max_delay`` is it cut back in one go. The level
(buffered audio ahead of the playout point) is only judged right after a new packet arrived:
while a delay spike is in progress it dips by design, and growing then would be wrong.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from kefu.errors import InvalidTransition

__all__ = ["JitterBuffer", "JitterStats", "Playout"]

State = Literal["idle", "playing", "buffering"]

_TRANSITIONS: Mapping[tuple[State, str], State] = MappingProxyType(
    {
        ("idle", "ready"): "playing",
        ("playing", "underrun"): "buffering",
        ("buffering", "ready"): "playing",
        ("playing", "resync"): "buffering",
        ("buffering", "resync"): "buffering",
        ("idle", "resync"): "idle",
    }
)

_SEQ_MOD = 1 << 16
_TS_MOD = 1 << 32
_ADAPT_INTERVAL = 5
"""Frames between two adaptation steps (100 ms at 20 ms frames)."""
_PEAK_MEMORY_S = 5.0
"""Time constant over which a delay spike is forgotten."""
_BASE_CREEP = 1e-3
"""The minimum-transit reference rises 1 ms per second of audio: ten times any real clock
drift, so drift never accumulates into a phantom delay."""
_MAX_SEQ_JUMP = 1000
"""A sequence jump larger than this is a sender restart, not loss (cf. RFC 3550 A.1's
MAX_DROPOUT of 3000, smaller here because a jitter buffer holds about a second at most)."""


@dataclass(frozen=True, slots=True)
class Playout:
    """One frame period's worth of output."""

    timestamp: int
    """RTP timestamp of the frame (RFC 3550 §5.1); for a hold, the frame being waited for."""

    payload: bytes | None
    """The RTP payload to decode, or None: the frame is missing, conceal it."""


@dataclass(frozen=True, slots=True)
class JitterStats:
    """Counters since creation (RFC 3611 §4.7 VoIP-metrics style)."""

    received: int
    """Packets handed to put()."""
    played: int
    """Frames popped with a payload."""
    lost: int
    """Packets the playout moved past without having them (sequence gaps, RFC 3550 §6.4.1
    "cumulative number of packets lost" as seen by the player); late ones are included."""
    late: int
    """Packets that arrived after their playout point had passed; dropped."""
    duplicate: int
    """Packets already buffered or already played; dropped."""
    overflow: int
    """Packets dropped because the buffer was full."""
    target_delay_ms: float
    """Current target playout delay."""
    jitter_ms: float
    """RFC 3550 §6.4.1 interarrival jitter estimate."""
    concealed: int = 0
    """Frames popped as None to grow the delay or while refilling after an underrun."""
    skipped: int = 0
    """Buffered frames discarded to shrink the delay."""
    resyncs: int = 0
    """Sender restarts detected (big sequence/timestamp jumps)."""


class JitterBuffer:
    """Reorder, de-duplicate and pace RTP audio payloads; see the module docstring."""

    def __init__(
        self,
        clock_rate: int,
        frame_ticks: int,
        *,
        min_delay_ms: int = 20,
        max_delay_ms: int = 200,
        capacity: int = 50,
    ) -> None:
        if clock_rate <= 0 or frame_ticks <= 0 or capacity <= 0:
            raise ValueError("clock_rate, frame_ticks and capacity must be positive")
        if not 0 <= min_delay_ms <= max_delay_ms:
            raise ValueError(
                f"need 0 <= min_delay_ms <= max_delay_ms, got {min_delay_ms}, {max_delay_ms}"
            )
        self._clock = clock_rate
        self._frame = frame_ticks
        self._min_ticks = min_delay_ms * clock_rate // 1000
        self._max_ticks = max_delay_ms * clock_rate // 1000
        self._capacity = capacity
        self._state: State = "idle"
        self._slots: dict[int, tuple[int, bytes]] = {}
        """extended timestamp -> (extended sequence number, payload)"""
        self._next_ts = 0
        self._last_seq: int | None = None
        """Extended sequence number of the last packet played."""
        self._played_seqs: deque[int] = deque(maxlen=2 * capacity)
        self._max_seq: int | None = None
        self._max_ts = 0
        self._probation: tuple[int, int, bytes, float] | None = None
        """(seq, timestamp, payload, arrival) of a packet that jumped far from the stream;
        its immediate successor confirms a sender restart, anything else discards it."""
        self._fill_since: float | None = None
        self._since_adapt = _ADAPT_INTERVAL
        self._fresh = False
        """A packet newer than all others arrived since the last pop."""
        self._transit: float | None = None
        self._jitter = 0.0
        """RFC 3550 A.8 jitter estimate, in timestamp ticks."""
        self._base_transit: float | None = None
        """Smallest transit seen (ticks), creeping up so clock drift is not taken for delay."""
        self._peak = 0.0
        """Decaying maximum of transit above the base, in ticks."""
        self._received = self._played = self._lost = self._late = 0
        self._duplicate = self._overflow = self._concealed = self._skipped = self._resyncs = 0

    @property
    def state(self) -> State:
        """``idle``, ``playing`` or ``buffering`` (see the module docstring)."""
        return self._state

    @property
    def target_delay_ms(self) -> float:
        """Playout delay the buffer currently steers towards."""
        return self._target_ticks() * 1000.0 / self._clock

    @property
    def stats(self) -> JitterStats:
        """A snapshot of the counters."""
        return JitterStats(
            received=self._received,
            played=self._played,
            lost=self._lost,
            late=self._late,
            duplicate=self._duplicate,
            overflow=self._overflow,
            target_delay_ms=self.target_delay_ms,
            jitter_ms=self._jitter * 1000.0 / self._clock,
            concealed=self._concealed,
            skipped=self._skipped,
            resyncs=self._resyncs,
        )

    # --- producer side ------------------------------------------------------------------

    def put(self, seq: int, timestamp: int, payload: bytes, arrival: float) -> None:
        """Accept one RTP packet (16-bit ``seq``, 32-bit ``timestamp``) arriving at ``arrival``."""
        self._received += 1
        seq &= _SEQ_MOD - 1
        timestamp &= _TS_MOD - 1
        if self._max_seq is None:
            self._max_seq, self._max_ts = seq, timestamp
        ext_seq = _unwrap(seq, self._max_seq, _SEQ_MOD)
        ext_ts = _unwrap(timestamp, self._max_ts, _TS_MOD)
        far_behind = ext_ts < self._max_ts - self._capacity * self._frame
        if abs(ext_seq - self._max_seq) > _MAX_SEQ_JUMP or far_behind:
            self._on_jump(seq, timestamp, payload, arrival)
            return
        if self._probation is not None:
            # the jumping packet was a stray, not a restart
            self._probation = None
            self._late += 1
        self._max_seq = max(self._max_seq, ext_seq)
        self._max_ts = max(self._max_ts, ext_ts)
        self._store(ext_seq, ext_ts, payload, arrival)

    def _on_jump(self, seq: int, timestamp: int, payload: bytes, arrival: float) -> None:
        probation = self._probation
        follows = (
            probation is not None
            and seq == (probation[0] + 1) % _SEQ_MOD
            and (timestamp - probation[1]) % _TS_MOD < _TS_MOD // 2
        )
        if probation is None or not follows:
            if probation is not None:
                self._late += 1
            self._probation = (seq, timestamp, payload, arrival)
            return
        self._probation = None
        self._resyncs += 1
        self._skipped += len(self._slots)
        self._slots.clear()
        self._played_seqs.clear()
        self._last_seq = None
        self._transit = None
        self._base_transit = None
        self._peak = 0.0
        self._to("resync")
        first_seq, first_ts, first_payload, first_arrival = probation
        self._max_seq, self._max_ts = first_seq, first_ts
        self._next_ts = first_ts
        self._fill_since = None
        self._store(first_seq, first_ts, first_payload, first_arrival)
        ext_ts = _unwrap(timestamp, first_ts, _TS_MOD)
        self._max_seq, self._max_ts = first_seq + 1, ext_ts
        self._store(first_seq + 1, ext_ts, payload, arrival)

    def _store(self, ext_seq: int, ext_ts: int, payload: bytes, arrival: float) -> None:
        if ext_ts in self._slots or ext_seq in self._played_seqs:
            self._duplicate += 1
            return
        self._update_jitter(ext_ts, arrival)
        if self._state != "idle" and ext_ts < self._next_ts:
            self._late += 1
            return
        if len(self._slots) >= self._capacity:
            self._overflow += 1
            oldest = min(self._slots)
            if ext_ts < oldest:
                return
            dropped_seq = self._slots.pop(oldest)[0]
            if self._state == "playing":
                # the dropped packet is accounted for as overflow, not as a later loss
                self._last_seq = dropped_seq
            if self._state == "playing" and self._slots:
                self._next_ts = max(self._next_ts, min(self._slots))
        if not self._slots and self._state != "playing":
            self._fill_since = arrival
        if not self._slots or ext_ts > max(self._slots):
            self._fresh = True
        self._slots[ext_ts] = (ext_seq, payload)

    def _update_jitter(self, ext_ts: int, arrival: float) -> None:
        transit = arrival * self._clock - ext_ts
        if self._transit is not None:
            self._jitter += (abs(transit - self._transit) - self._jitter) / 16.0
        self._transit = transit
        frame_s = self._frame / self._clock
        if self._base_transit is None:
            self._base_transit = transit
        self._base_transit = min(self._base_transit + _BASE_CREEP * self._frame, transit)
        self._peak = max(
            self._peak * (1.0 - frame_s / _PEAK_MEMORY_S), transit - self._base_transit
        )

    # --- consumer side ------------------------------------------------------------------

    def pop(self, now: float) -> Playout | None:
        """The frame to play for the period starting ``now``; None only before priming."""
        if self._state == "idle":
            if not self._ready(now):
                return None
            self._start_playing()
        elif self._state == "buffering":
            if not self._ready(now):
                return self._hold()
            self._start_playing()
        elif not self._slots:
            self._to("underrun")
            self._fill_since = None
            return self._hold()
        return self._play()

    # --- prompt playout (a recognizer, not a loudspeaker) ---------------------------------

    def next_in_hand(self) -> bool:
        """The frame that plays next has arrived: :meth:`pop_now` would return its payload."""
        if not self._slots:
            return False
        if self._state != "playing" or self._next_ts in self._slots:
            return True
        nearest = min(self._slots)
        # a sender that skipped timestamps (silence) without skipping a sequence number
        return self._last_seq is not None and self._slots[nearest][0] == self._last_seq + 1

    def pop_now(self) -> Playout:
        """The next frame at once, with no target delay and no adaptation.

        For a consumer that releases audio as it arrives and decides itself when a missing
        frame has been waited for long enough: the frame in hand if :meth:`next_in_hand`,
        else a concealed one (payload None), the playout point moving past it so the packet,
        should it still come, counts as late.
        """
        if self._state != "playing":
            if not self._slots:
                return self._hold()
            self._to("ready")
            self._next_ts = min(self._slots)
        if not self.next_in_hand():
            self._concealed += 1
            return self._advance(None)
        return self._play_next()

    def _ready(self, now: float) -> bool:
        if not self._slots:
            return False
        span = max(self._slots) + self._frame - min(self._slots)
        waited = self._fill_since is not None and (now - self._fill_since) * self._clock >= (
            self._target_ticks()
        )
        return span >= self._target_ticks() or waited

    def _start_playing(self) -> None:
        self._to("ready")
        self._next_ts = min(self._slots)
        self._since_adapt = 0

    def _hold(self) -> Playout:
        self._concealed += 1
        return Playout(self._next_ts % _TS_MOD, None)

    def _play(self) -> Playout:
        self._since_adapt += 1
        fresh, self._fresh = self._fresh, False
        target = self._target_ticks()
        level = max(self._slots) + self._frame - self._next_ts
        if level > self._max_ticks + self._frame:
            while level > target:
                self._discard()
                level -= self._frame
            self._since_adapt = 0
        elif fresh and self._since_adapt >= _ADAPT_INTERVAL:
            if level >= target + 2 * self._frame:
                self._discard()
                self._since_adapt = 0
            elif level + self._frame <= target:
                self._since_adapt = 0
                return self._hold()
        return self._play_next()

    def _play_next(self) -> Playout:
        entry = self._slots.pop(self._next_ts, None)
        if entry is None:
            nearest = min(self._slots)
            if self._last_seq is not None and self._slots[nearest][0] != self._last_seq + 1:
                # counted as lost when the next packet plays and reveals the sequence gap
                return self._advance(None)
            # no sequence number is missing: the sender skipped timestamps (silence)
            self._next_ts = nearest
            entry = self._slots.pop(nearest)
        seq, payload = entry
        if self._last_seq is not None:
            self._lost += max(0, seq - self._last_seq - 1)
        self._last_seq = seq
        self._played_seqs.append(seq)
        self._played += 1
        return self._advance(payload)

    def _discard(self) -> None:
        entry = self._slots.pop(self._next_ts, None)
        if entry is not None:
            self._skipped += 1
            self._last_seq = entry[0]
        self._next_ts += self._frame

    def _advance(self, payload: bytes | None) -> Playout:
        played = Playout(self._next_ts % _TS_MOD, payload)
        self._next_ts += self._frame
        return played

    def _target_ticks(self) -> int:
        wanted = self._frame + max(3.0 * self._jitter, self._peak)
        # the level only moves in whole frames: round up, or a spike just over a frame
        # boundary would underrun every time
        whole = -(-int(wanted) // self._frame) * self._frame
        # never below one frame, even if max_delay is configured shorter than a frame
        return max(min(max(whole, self._min_ticks), self._max_ticks), self._frame)

    def _to(self, event: str) -> None:
        new = _TRANSITIONS.get((self._state, event))
        if new is None:
            raise InvalidTransition("JitterBuffer", self._state, event)
        self._state = new


def _unwrap(value: int, reference: int, modulus: int) -> int:
    """Extend a wrapped counter to the value nearest ``reference`` (RFC 3550 A.1)."""
    delta = (value - reference) % modulus
    if delta >= modulus // 2:
        delta -= modulus
    return reference + delta

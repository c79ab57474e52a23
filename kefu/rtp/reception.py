"""Reception statistics for one RTP source (RFC 3550 Appendix A.1, A.3, A.8).

API CONTRACT:

    s = SourceStatistics(clock_rate, first_seq)
    s.update_seq(seq) -> bool            # A.1; False: drop this packet (a resync probe)
    s.update_jitter(timestamp, arrival)  # A.8; arrival in seconds (any monotonic clock)
    s.expected, s.received, s.cumulative_lost, s.extended_highest, s.jitter (ticks),
    s.jitter_ms, s.interval_fraction_lost() -> int (x/256, advances the A.3 interval)

Probation (A.1's MIN_SEQUENTIAL) is deliberately left out: the session only admits packets
from a latched source, and dropping a caller's first two packets would clip the greeting.
"""

from __future__ import annotations

_SEQ_MOD = 1 << 16
_TS_MOD = 1 << 32
# A.1: a forward jump of under MAX_DROPOUT is loss; within MAX_MISORDER behind is reordering.
MAX_DROPOUT = 3000
MAX_MISORDER = 100


class SourceStatistics:
    """Sequence, loss and jitter bookkeeping for one SSRC."""

    def __init__(self, clock_rate: int, first_seq: int) -> None:
        self.clock_rate = clock_rate
        self._init_seq(first_seq)
        self.jitter = 0.0
        self._last_timestamp: int | None = None
        self._last_arrival = 0.0

    def _init_seq(self, seq: int) -> None:
        self.base_seq = seq
        self.max_seq = seq
        self.bad_seq = _SEQ_MOD + 1  # a value no 16-bit sequence number can take
        self.cycles = 0
        self.received = 0
        self.received_prior = 0
        self.expected_prior = 0

    def update_seq(self, seq: int) -> bool:
        """Account one packet (A.1 update_seq). The first packet is passed here too."""
        udelta = (seq - self.max_seq) % _SEQ_MOD
        if self.received == 0 and seq == self.base_seq:
            pass
        elif udelta < MAX_DROPOUT:
            if seq < self.max_seq:
                self.cycles += _SEQ_MOD
            self.max_seq = seq
        elif udelta <= _SEQ_MOD - MAX_MISORDER:
            if seq != self.bad_seq:
                # A huge jump: wait for the next packet to confirm the peer restarted.
                self.bad_seq = (seq + 1) % _SEQ_MOD
                return False
            self._init_seq(seq)
            self._last_timestamp = None
        # else: a duplicate or a reordered packet; counted, max_seq untouched.
        self.received += 1
        return True

    def update_jitter(self, timestamp: int, arrival: float) -> None:
        """A.8 interarrival jitter, with the timestamp difference taken modulo 2^32."""
        if self._last_timestamp is not None:
            ts_delta = (timestamp - self._last_timestamp + (1 << 31)) % _TS_MOD - (1 << 31)
            d = (arrival - self._last_arrival) * self.clock_rate - ts_delta
            self.jitter += (abs(d) - self.jitter) / 16.0
        self._last_timestamp = timestamp
        self._last_arrival = arrival

    def reset_jitter(self, clock_rate: int) -> None:
        """Forget jitter history, e.g. after a codec change altered the clock rate."""
        self.clock_rate = clock_rate
        self.jitter = 0.0
        self._last_timestamp = None

    @property
    def extended_highest(self) -> int:
        return self.cycles + self.max_seq

    @property
    def expected(self) -> int:
        return self.extended_highest - self.base_seq + 1

    @property
    def cumulative_lost(self) -> int:
        """Expected minus received (A.3); negative when duplicates arrived."""
        return self.expected - self.received

    @property
    def cumulative_lost_24(self) -> int:
        """cumulative_lost clamped to the report block's signed 24-bit field."""
        return max(-(1 << 23), min((1 << 23) - 1, self.cumulative_lost))

    @property
    def jitter_ms(self) -> float:
        return 1000.0 * self.jitter / self.clock_rate

    def interval_fraction_lost(self) -> int:
        """Fraction lost since the previous call, 8-bit fixed point (A.3)."""
        expected = self.expected
        expected_interval = expected - self.expected_prior
        self.expected_prior = expected
        received_interval = self.received - self.received_prior
        self.received_prior = self.received
        lost_interval = expected_interval - received_interval
        if expected_interval <= 0 or lost_interval <= 0:
            return 0
        return min(255, (lost_interval << 8) // expected_interval)

    def peek_fraction_lost(self) -> float:
        """Fraction lost since the last interval_fraction_lost(), without advancing it."""
        expected_interval = self.expected - self.expected_prior
        lost_interval = expected_interval - (self.received - self.received_prior)
        if expected_interval <= 0 or lost_interval <= 0:
            return 0.0
        return lost_interval / expected_interval

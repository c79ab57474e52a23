"""RFC 3550 A.1/A.3/A.8 receive statistics, fed by hand."""

from __future__ import annotations

import pytest

from kefu.rtp.reception import SourceStatistics


def feed(stats: SourceStatistics, seqs: list[int]) -> list[bool]:
    return [stats.update_seq(s) for s in seqs]


def test_in_order_no_loss() -> None:
    s = SourceStatistics(8000, 100)
    assert all(feed(s, list(range(100, 150))))
    assert (s.expected, s.received, s.cumulative_lost) == (50, 50, 0)
    assert s.extended_highest == 149


def test_loss_and_fraction_per_interval() -> None:
    s = SourceStatistics(8000, 0)
    feed(s, [0, 1, 2, 5, 6, 7, 8, 9])  # 3 and 4 lost
    assert s.cumulative_lost == 2
    assert s.peek_fraction_lost() == pytest.approx(0.2)
    assert s.interval_fraction_lost() == (2 << 8) // 10  # 51/256
    feed(s, list(range(10, 20)))
    assert s.interval_fraction_lost() == 0  # nothing lost in the second interval
    assert s.cumulative_lost == 2


def test_wraparound_counts_cycles() -> None:
    s = SourceStatistics(8000, 65530)
    feed(s, [65530, 65531, 65532, 65533, 65534, 65535, 0, 1, 2])
    assert s.cycles == 1 << 16
    assert s.extended_highest == (1 << 16) + 2
    assert s.expected == 9 and s.cumulative_lost == 0


def test_reorder_and_duplicate() -> None:
    s = SourceStatistics(8000, 10)
    feed(s, [10, 12, 11, 12])
    assert s.max_seq == 12
    assert s.received == 4 and s.expected == 3
    assert s.cumulative_lost == -1  # a duplicate reads as negative loss (A.3)


def test_large_jump_needs_two_packets_to_resync() -> None:
    s = SourceStatistics(8000, 0)
    feed(s, [0, 1, 2])
    assert s.update_seq(20000) is False  # could be a stray: probe
    assert s.update_seq(20001) is True  # sequential: the sender restarted
    assert s.base_seq == 20001 and s.received == 1


def test_jitter_constant_transit_is_zero() -> None:
    s = SourceStatistics(8000, 0)
    for i in range(50):
        s.update_jitter(160 * i, 1.0 + 0.02 * i)
    assert s.jitter == pytest.approx(0.0, abs=1e-6)


def test_jitter_alternating_delay() -> None:
    # Every other packet 10 ms late: |D| is 80 ticks each time, so J converges to 80 ticks
    # (10 ms at 8 kHz) by J += (|D| - J) / 16.
    s = SourceStatistics(8000, 0)
    for i in range(400):
        s.update_jitter(160 * i, 0.02 * i + (0.01 if i % 2 else 0.0))
    assert s.jitter == pytest.approx(80.0, rel=1e-3)
    assert s.jitter_ms == pytest.approx(10.0, rel=1e-3)


def test_jitter_single_step_matches_formula() -> None:
    s = SourceStatistics(8000, 0)
    s.update_jitter(0, 0.0)
    s.update_jitter(160, 0.025)  # 5 ms late = 40 ticks
    assert s.jitter == pytest.approx(40 / 16)


def test_jitter_across_timestamp_wrap() -> None:
    s = SourceStatistics(8000, 0)
    s.update_jitter(0xFFFFFF60, 0.0)
    s.update_jitter(0x00000000, 0.02)  # +160 ticks across the wrap, on time
    assert s.jitter == pytest.approx(0.0, abs=1e-6)

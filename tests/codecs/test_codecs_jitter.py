"""Adaptive jitter buffer driven by synthetic arrival times (no sleeping, no clock)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import pytest

from kefu.codecs.jitter import JitterBuffer, JitterStats, Playout
from kefu.errors import InvalidTransition

FRAME = 0.02
TICKS = 160


def payload(seq: int) -> bytes:
    return seq.to_bytes(2, "big")


def simulate(
    jb: JitterBuffer,
    count: int,
    *,
    delay: Callable[[int], float | None] = lambda n: 0.005,
    seq0: int = 1000,
    ts0: int = 50_000,
    copies: int = 1,
    extra_pops: int = 30,
    ts_of: Callable[[int], int] | None = None,
) -> list[Playout | None]:
    """Packet n is sent at n*20 ms, arrives after ``delay(n)`` (None = lost); the consumer
    pops every 20 ms at a 3 ms phase offset. Returns every pop's result."""
    events: list[tuple[float, int, int]] = []  # (time, order, n); order puts before pops
    for n in range(count):
        d = delay(n)
        if d is not None:
            for c in range(copies):
                events.append((n * FRAME + d + c * 0.001, 0, n))
    pops = count + extra_pops
    events += [(k * FRAME + 0.003, 1, k) for k in range(pops)]
    events.sort()
    out: list[Playout | None] = []
    for time, kind, n in events:
        if kind == 0:
            ts = ts_of(n) if ts_of else ts0 + n * TICKS
            jb.put((seq0 + n) & 0xFFFF, ts & 0xFFFFFFFF, payload((seq0 + n) & 0xFFFF), time)
        else:
            out.append(jb.pop(time))
    return out


def played_seqs(out: Iterable[Playout | None]) -> list[int]:
    return [int.from_bytes(p.payload, "big") for p in out if p is not None and p.payload]


def test_not_primed_until_first_packet() -> None:
    jb = JitterBuffer(8000, TICKS)
    assert jb.pop(0.0) is None
    assert jb.state == "idle"
    jb.put(1, 160, b"x", 0.01)
    assert jb.pop(0.02) == Playout(160, b"x")
    assert jb.state == "playing"


def test_in_order_constant_delay_plays_everything_in_order() -> None:
    jb = JitterBuffer(8000, TICKS)
    out = simulate(jb, 200)
    assert played_seqs(out) == list(range(1000, 1200))
    s = jb.stats
    assert (s.received, s.played, s.lost, s.late, s.duplicate, s.overflow) == (200, 200, 0, 0, 0, 0)
    assert s.target_delay_ms == 20.0 and s.jitter_ms < 0.01
    first = next(p for p in out if p is not None)
    assert first.timestamp == 50_000
    # after the stream ends the consumer is told to conceal, never given None again
    assert out[-1] == Playout((50_000 + 200 * TICKS) & 0xFFFFFFFF, None)


def test_loss_gives_a_none_in_the_right_slot() -> None:
    jb = JitterBuffer(8000, TICKS)
    out = [p for p in simulate(jb, 50, delay=lambda n: None if n in (10, 30, 31) else 0.005) if p]
    assert out[10] == Playout(50_000 + 10 * TICKS, None)
    assert out[30].payload is None and out[31].payload is None
    assert out[32] == Playout(50_000 + 32 * TICKS, payload(1032))
    s = jb.stats
    assert s.lost == 3 and s.played == 47


def test_reordering_within_the_target_delay_loses_nothing() -> None:
    jb = JitterBuffer(8000, TICKS, min_delay_ms=60)

    def swap_pairs(n: int) -> float:
        # every odd packet overtakes its predecessor
        return 0.030 if n % 2 == 0 else 0.005

    out = simulate(jb, 100, delay=swap_pairs)
    assert played_seqs(out) == list(range(1000, 1100))
    assert jb.stats.lost == 0 and jb.stats.late == 0


def test_duplicates_are_counted_and_dropped() -> None:
    jb = JitterBuffer(8000, TICKS)
    out = simulate(jb, 100, copies=2)
    assert played_seqs(out) == list(range(1000, 1100))
    assert jb.stats.duplicate == 100


def test_late_packet_is_counted_and_dropped() -> None:
    jb = JitterBuffer(8000, TICKS)
    out = simulate(jb, 60, delay=lambda n: 0.5 if n == 20 else 0.005)
    assert 1020 not in played_seqs(out)
    s = jb.stats
    assert s.late == 1 and s.lost == 1


def test_sequence_and_timestamp_wrap_around() -> None:
    jb = JitterBuffer(8000, TICKS)
    out = simulate(jb, 100, seq0=65500, ts0=(1 << 32) - 50 * TICKS)
    seqs = played_seqs(out)
    assert seqs == [(65500 + n) & 0xFFFF for n in range(100)]
    stamps = [p.timestamp for p in out if p is not None and p.payload]
    assert stamps[49] == (1 << 32) - TICKS and stamps[50] == 0
    assert jb.stats.lost == 0 and jb.stats.resyncs == 0


def test_wrap_around_with_reordering_across_the_wrap() -> None:
    jb = JitterBuffer(8000, TICKS, min_delay_ms=60)
    out = simulate(
        jb, 40, seq0=65530, ts0=(1 << 32) - 5 * TICKS, delay=lambda n: 0.03 if n == 5 else 0.005
    )
    assert played_seqs(out) == [(65530 + n) & 0xFFFF for n in range(40)]


def test_overflow_drops_the_oldest() -> None:
    jb = JitterBuffer(8000, TICKS, capacity=50)
    for n in range(60):
        jb.put(n, n * TICKS, payload(n), n * FRAME)
    assert jb.stats.overflow == 10
    first = jb.pop(1.2)
    assert first is not None and first.payload is not None
    # the buffer holds far more than max_delay: it is cut back to the target at once
    assert int.from_bytes(first.payload, "big") >= 10
    assert jb.stats.skipped > 0


def test_bursty_jitter_raises_the_target_and_avoids_loss() -> None:
    rng = random.Random(7)
    jb = JitterBuffer(8000, TICKS, max_delay_ms=300)
    # every 25th packet is held up 120 ms and the ones behind it queue up (a burst)
    spikes = [0.0] * 1000
    for start in range(50, 1000, 25):
        for k in range(6):
            spikes[start + k] = max(0.0, 0.12 - k * FRAME)
    out = simulate(jb, 1000, delay=lambda n: 0.005 + spikes[n] + rng.uniform(0, 0.004))
    s = jb.stats
    assert s.jitter_ms > 5
    assert s.target_delay_ms > 40
    # after the first spike the target covers it: every later spike is absorbed
    assert all(p is not None and p.payload is not None for p in out[100:1000])
    assert s.played == 1000 and s.lost == 0 and s.late == 0
    assert s.target_delay_ms == 140.0  # 120 ms spike + 4 ms noise, rounded up to frames + 1


def test_delay_spike_is_absorbed_then_the_delay_shrinks_back() -> None:
    jb = JitterBuffer(8000, TICKS)

    def outage(n: int) -> float:
        # packets 100..109 are stuck for 200 ms in a queue, then all arrive together
        return 0.005 + (max(0.0, 0.2 - (n - 100) * FRAME) if 100 <= n < 110 else 0.0)

    out = simulate(jb, 1000, delay=outage)
    seqs = played_seqs(out)
    s = jb.stats
    assert s.lost == 0 and s.late == 0
    assert s.concealed >= 9  # the consumer concealed while the buffer refilled
    assert 1100 in seqs and 1105 in seqs
    # the spike is remembered for a while (5 s time constant), then the extra delay is shed
    # by skipping frames one at a time
    assert s.target_delay_ms == 40.0
    assert 8 <= s.skipped <= 12
    assert s.played + s.skipped == 1000


def test_silence_timestamp_jump_is_not_loss() -> None:
    jb = JitterBuffer(8000, TICKS)

    # DTX: after packet 49 the sender stays silent for 2 s; seq numbers continue
    def ts_of(n: int) -> int:
        return 50_000 + n * TICKS + (16_000 if n >= 50 else 0)

    out = simulate(
        jb, 100, ts_of=ts_of, delay=lambda n: 0.005 + (2.0 if n >= 50 else 0.0), extra_pops=140
    )
    assert played_seqs(out) == list(range(1000, 1100))
    assert jb.stats.lost == 0


def test_sender_restart_resynchronises() -> None:
    jb = JitterBuffer(8000, TICKS)

    def ts_of(n: int) -> int:
        return 50_000 + n * TICKS if n < 50 else 9_000_000 + n * TICKS

    out: list[Playout | None] = []
    for n in range(100):
        seq = 1000 + n if n < 50 else 40_000 + n
        ts = ts_of(n)
        jb.put(seq, ts, payload(seq), n * FRAME + 0.005)
        out.append(jb.pop(n * FRAME + 0.008))
    seqs = played_seqs(out)
    assert seqs[:50] == list(range(1000, 1050))
    assert seqs[50:] == list(range(40_050, 40_050 + len(seqs) - 50))
    assert len(seqs) >= 98
    assert jb.stats.resyncs == 1


def test_stray_packet_does_not_resync() -> None:
    jb = JitterBuffer(8000, TICKS)
    for n in range(20):
        jb.put(100 + n, n * TICKS, payload(n), n * FRAME)
        if n == 10:
            jb.put(30_000, 7_777_777, b"stray", n * FRAME)
        jb.pop(n * FRAME + 0.001)
    assert jb.stats.resyncs == 0
    assert jb.stats.late == 1


def test_stats_snapshot_is_frozen() -> None:
    s = JitterBuffer(48000, 960).stats
    assert isinstance(s, JitterStats)
    with pytest.raises(AttributeError):
        s.played = 3  # type: ignore[misc]


def test_illegal_transition_raises() -> None:
    jb = JitterBuffer(8000, TICKS)
    with pytest.raises(InvalidTransition):
        jb._to("underrun")


def test_bad_configuration() -> None:
    with pytest.raises(ValueError):
        JitterBuffer(8000, 0)
    with pytest.raises(ValueError):
        JitterBuffer(8000, 160, min_delay_ms=300, max_delay_ms=200)


def test_max_delay_shorter_than_a_frame_still_plays() -> None:
    jb = JitterBuffer(8000, TICKS, min_delay_ms=0, max_delay_ms=10)
    for n in range(30):
        jb.put(n, n * TICKS, payload(n), 0.0)
    # 600 ms queued against a 10 ms limit: cut back to a single frame at once
    assert jb.pop(0.0) == Playout(29 * TICKS, payload(29))
    assert jb.stats.skipped == 29
    assert jb.pop(0.02) == Playout(30 * TICKS, None)


def test_48k_opus_clock() -> None:
    jb = JitterBuffer(48000, 960)
    out = simulate(jb, 50, ts_of=lambda n: 7 + n * 960, delay=lambda n: None if n == 9 else 0.005)
    assert played_seqs(out) == [1000 + n for n in range(50) if n != 9]
    assert jb.stats.lost == 1 and jb.stats.target_delay_ms == 20.0


# --- prompt playout (pop_now) --------------------------------------------------------------


def test_pop_now_releases_each_frame_as_it_arrives() -> None:
    jb = JitterBuffer(8000, TICKS)
    assert not jb.next_in_hand()
    jb.put(1000, 50_000, payload(1000), 0.0)
    assert jb.next_in_hand()  # the very first packet plays at once: no target delay
    assert jb.pop_now() == Playout(50_000, payload(1000))
    assert jb.state == "playing" and not jb.next_in_hand()
    jb.put(1002, 50_000 + 2 * TICKS, payload(1002), 0.05)  # 1001 is not here yet
    assert not jb.next_in_hand()
    jb.put(1001, 50_000 + TICKS, payload(1001), 0.051)  # reordered: now both are in hand
    assert played_seqs([jb.pop_now(), jb.pop_now()]) == [1001, 1002]
    assert jb.stats.lost == 0 and jb.stats.concealed == 0


def test_pop_now_conceals_a_missing_frame_and_drops_it_if_it_comes_late() -> None:
    jb = JitterBuffer(8000, TICKS)
    jb.put(1000, 50_000, payload(1000), 0.0)
    jb.pop_now()
    concealed = jb.pop_now()  # the consumer gave up waiting for 1001
    assert concealed == Playout(50_000 + TICKS, None)
    jb.put(1001, 50_000 + TICKS, payload(1001), 0.07)  # too late: counted, never played
    jb.put(1002, 50_000 + 2 * TICKS, payload(1002), 0.071)
    assert jb.next_in_hand()
    assert played_seqs([jb.pop_now()]) == [1002]
    stats = jb.stats
    assert (stats.late, stats.lost, stats.concealed, stats.played) == (1, 1, 1, 2)


def test_pop_now_follows_a_sender_that_skips_timestamps_in_silence() -> None:
    jb = JitterBuffer(8000, TICKS)
    jb.put(1000, 50_000, payload(1000), 0.0)
    jb.pop_now()
    jb.put(1001, 50_000 + 50 * TICKS, payload(1001), 1.0)  # next seq, timestamp 1 s later
    assert jb.next_in_hand()
    out = jb.pop_now()
    assert out == Playout(50_000 + 50 * TICKS, payload(1001))
    assert jb.stats.lost == 0

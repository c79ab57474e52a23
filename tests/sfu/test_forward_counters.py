"""SFU metric counters at the forwarding seam (no network)."""

from __future__ import annotations

from kefu.sfu.forward import PacketSource, SfuCounters


def test_full_subscriber_queues_count_their_drops() -> None:
    counters = SfuCounters()
    source = PacketSource("alice", queue_len=3, clock=lambda: 0.0, counters=counters)
    slow, fast = source.subscribe(), source.subscribe()
    for i in range(5):
        source.publish(b"\xfc", i * 960)
        assert fast.get_nowait() is not None  # this one keeps up
    assert len(slow) == 3 and slow.dropped == 2 and fast.dropped == 0
    assert source.stats.dropped == counters.packets_dropped == 2
    source.publish(b"", 0)  # rejected: nothing queued, nothing dropped
    assert counters.packets_dropped == 2 and source.stats.rejected == 1

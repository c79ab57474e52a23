"""The per-source gate before parsing (kefu.sip.admission): time is passed in, no sockets."""

from __future__ import annotations

from kefu.sip.admission import AdmissionLimits, SourceGate

INVITE = b"INVITE sip:4001@127.0.0.1 SIP/2.0\r\n"
OPTIONS = b"OPTIONS sip:4001@127.0.0.1 SIP/2.0\r\n"


def test_bucket_lets_burst_then_rate_through() -> None:
    gate = SourceGate(AdmissionLimits(rate=100, burst=10))
    verdicts = [gate.check(OPTIONS, "127.0.0.2", 0.0) for _ in range(15)]
    assert verdicts == [None] * 10 + ["rate_limited"] * 5
    # 0.05 s later: 5 tokens back.
    verdicts = [gate.check(OPTIONS, "127.0.0.2", 0.05) for _ in range(6)]
    assert verdicts == [None] * 5 + ["rate_limited"]
    assert gate.drops == {"rate_limited": 6, "source_held": 0}


def test_sources_are_independent_and_trunk_rate_passes() -> None:
    gate = SourceGate(AdmissionLimits(rate=500, burst=1000))
    flood = trunk = 0
    # 2 s: a flooder at 2000/s and a 100 calls/s trunk (300 messages/s) from another IP.
    for i in range(4000):
        now = i / 2000
        flood += gate.check(INVITE, "127.0.0.2", now) is None
        if i % 20 < 3:
            trunk += gate.check(INVITE, "127.0.0.1", now) is None
    assert trunk == 600
    assert 1000 + 500 * 2 - 2 <= flood <= 1000 + 500 * 2 + 1


def test_exempt_networks_are_never_limited() -> None:
    gate = SourceGate(AdmissionLimits(rate=1, burst=1, exempt=("10.0.0.0/8",)))
    assert all(gate.check(INVITE, "10.1.2.3", 0.0) is None for _ in range(100))
    assert gate.exempt("10.1.2.3") and not gate.exempt("127.0.0.1")
    gate.hold("10.1.2.3", 5.0, 0.0)
    assert gate.check(INVITE, "10.1.2.3", 1.0) is None


def test_hold_drops_only_new_invites_until_it_ends() -> None:
    gate = SourceGate(AdmissionLimits(rate=0))
    gate.hold("127.0.0.2", 1.0, 0.0)
    assert gate.held("127.0.0.2", 0.5)
    assert gate.check(INVITE, "127.0.0.2", 0.5) == "source_held"
    assert gate.check(b"ACK sip:x SIP/2.0\r\n", "127.0.0.2", 0.5) is None
    assert gate.check(b"BYE sip:x SIP/2.0\r\n", "127.0.0.2", 0.5) is None
    assert gate.check(INVITE, "127.0.0.1", 0.5) is None
    assert gate.check(INVITE, "127.0.0.2", 1.0) is None
    assert not gate.held("127.0.0.2", 1.0)


def test_memory_is_bounded_by_max_sources() -> None:
    gate = SourceGate(AdmissionLimits(rate=1, burst=1, max_sources=64))
    for i in range(10_000):
        gate.check(OPTIONS, f"10.0.{i // 256}.{i % 256}", 0.0)
    assert len(gate) == 64
    # The most recent sources are the ones remembered: their bucket is empty.
    assert gate.check(OPTIONS, "10.0.39.15", 0.0) == "rate_limited"


def test_drops_are_logged_once_per_interval_with_their_count() -> None:
    gate = SourceGate(AdmissionLimits(rate=1, burst=1, log_interval=10.0))
    gate.check(OPTIONS, "127.0.0.2", 0.0)
    for _ in range(100):
        gate.check(OPTIONS, "127.0.0.2", 0.0)
    assert gate.take_log("127.0.0.2", 0.0) == 100
    for _ in range(50):
        gate.check(OPTIONS, "127.0.0.2", 1.0)
    assert gate.take_log("127.0.0.2", 1.0) == 0  # too soon: counted, not logged
    assert gate.take_log("127.0.0.2", 10.0) == 49  # one token came back at t=1
    assert gate.take_log("127.0.0.9", 10.0) == 0

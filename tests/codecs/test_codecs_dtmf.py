"""RFC 4733 telephone-events: golden payloads, the receiver's de-duplication, the sender."""

from __future__ import annotations

from pathlib import Path

import pytest

from kefu.codecs.dtmf import (
    EVENT_TO_DIGIT,
    DtmfDigit,
    DtmfReceiver,
    TelephoneEvent,
    digit_for_event,
    dtmf_packets,
    event_for_digit,
)
from kefu.errors import CodecError

GOLDEN = Path(__file__).parent / "golden" / "dtmf"


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("digit5_start_vol10_dur160.bin", TelephoneEvent(5, False, 10, 160)),
        ("hash_end_vol10_dur1280.bin", TelephoneEvent(11, True, 10, 1280)),
        ("flash_end_vol0_dur65535.bin", TelephoneEvent(16, True, 0, 65535)),
        ("star_vol63_dur800.bin", TelephoneEvent(10, False, 63, 800)),
    ],
)
def test_golden_round_trip(filename: str, expected: TelephoneEvent) -> None:
    data = (GOLDEN / filename).read_bytes()
    assert TelephoneEvent.parse(data) == expected
    assert bytes(expected) == data
    assert expected.serialize() == data


def test_reserved_bit_is_ignored() -> None:
    data = (GOLDEN / "reserved_bit_set.bin").read_bytes()
    event = TelephoneEvent.parse(data)
    assert event == TelephoneEvent(5, True, 10, 160)
    assert bytes(event) == b"\x05\x8a\x00\xa0"  # R is sent as zero (RFC 4733 §2.3.3)


def test_multi_event_payload_parses_the_first() -> None:
    data = (GOLDEN / "two_events_in_one_payload.bin").read_bytes()
    assert TelephoneEvent.parse(data) == TelephoneEvent(12, False, 10, 160)


@pytest.mark.parametrize("data", [b"", b"\x05", b"\x05\x8a\x00"])
def test_short_payload_rejected(data: bytes) -> None:
    with pytest.raises(CodecError, match="needs 4"):
        TelephoneEvent.parse(data)


def test_field_ranges_checked() -> None:
    with pytest.raises(ValueError):
        TelephoneEvent(5, False, 64, 0)
    with pytest.raises(ValueError):
        TelephoneEvent(256, False, 0, 0)
    with pytest.raises(ValueError):
        TelephoneEvent(5, False, 0, 65536)


def test_digit_mapping() -> None:
    assert "".join(EVENT_TO_DIGIT[i] for i in range(17)) == "0123456789*#ABCD!"
    for event, digit in EVENT_TO_DIGIT.items():
        assert digit_for_event(event) == digit
        assert event_for_digit(digit) == event
    assert event_for_digit("b") == 13
    with pytest.raises(CodecError):
        digit_for_event(17)
    with pytest.raises(CodecError):
        event_for_digit("E")


def test_sender_sequence_matches_golden() -> None:
    lines = (GOLDEN / "sequence_digit1_100ms.txt").read_text().splitlines()
    expected = [
        (bytes.fromhex(h), m == "1") for m, h in (ln.split() for ln in lines if ln[0] != "#")
    ]
    got = [(bytes(event), marker) for event, marker in dtmf_packets("1", duration_ms=100)]
    assert got == expected


def test_sender_default_and_other_clocks() -> None:
    packets = dtmf_packets("#")
    assert len(packets) == 7 + 3
    assert [m for _, m in packets] == [True] + [False] * 9
    assert [e.duration for e, _ in packets][-4:] == [1120, 1280, 1280, 1280]
    assert all(e.end for e, _ in packets[-3:]) and not any(e.end for e, _ in packets[:-3])
    wideband = dtmf_packets("9", clock_rate=48000, duration_ms=100)
    assert wideband[-1][0].duration == 4800
    short = dtmf_packets("0", duration_ms=10)
    assert [(e.end, m) for e, m in short] == [(True, True), (True, False), (True, False)]
    with pytest.raises(ValueError):
        dtmf_packets("1", duration_ms=10_000)


def feed_all(rx: DtmfReceiver, ts: int, packets: list[tuple[TelephoneEvent, bool]]) -> list[str]:
    return [d for e, m in packets if (d := rx.feed(ts, bytes(e), m)) is not None]


def test_receiver_reports_each_digit_once_with_duration() -> None:
    rx = DtmfReceiver()
    assert feed_all(rx, 1000, dtmf_packets("1")) == ["1"]
    assert rx.last_digit == DtmfDigit("1", 160)
    assert feed_all(rx, 3000, dtmf_packets("1", duration_ms=60)) == ["1"]
    assert rx.last_digit == DtmfDigit("1", 60)
    assert feed_all(rx, 5000, dtmf_packets("*")) == ["*"]


def test_receiver_survives_a_lost_first_packet_and_stragglers() -> None:
    rx = DtmfReceiver()
    first = dtmf_packets("7")
    second = dtmf_packets("8")
    assert feed_all(rx, 100, first[1:]) == ["7"]
    assert feed_all(rx, 2000, second[:4]) == ["8"]
    # a late retransmitted end packet of "7" must not report it again
    assert rx.feed(100, bytes(first[-1][0]), False) is None
    assert feed_all(rx, 2000, second[4:]) == []
    assert rx.last_digit == DtmfDigit("8", 160)


def test_receiver_only_end_packets() -> None:
    rx = DtmfReceiver()
    assert feed_all(rx, 42, dtmf_packets("5")[-3:]) == ["5"]


def test_receiver_lost_end_packets_still_closes_the_event() -> None:
    rx = DtmfReceiver()
    assert feed_all(rx, 0, dtmf_packets("2")[:-3]) == ["2"]
    assert rx.last_digit is None
    assert feed_all(rx, 4000, dtmf_packets("3")) == ["3"]
    assert rx.last_digit == DtmfDigit("3", 160)


def test_receiver_timestamp_wrap() -> None:
    rx = DtmfReceiver()
    assert feed_all(rx, 0xFFFFFF00, dtmf_packets("4")) == ["4"]
    assert feed_all(rx, 0x00000100, dtmf_packets("4")) == ["4"]


def test_long_event_second_segment_is_not_a_new_press() -> None:
    rx = DtmfReceiver()
    start = 0xFFFF0000
    assert rx.feed(start, bytes(TelephoneEvent(6, False, 10, 0xFFFF)), True) == "6"
    # RFC 4733 §2.5.1.3: the next segment starts where the first one's duration ends
    nxt = (start + 0xFFFF) % (1 << 32)
    assert rx.feed(nxt, bytes(TelephoneEvent(6, False, 10, 8000)), False) is None
    assert rx.feed(nxt, bytes(TelephoneEvent(6, True, 10, 16000)), False) is None
    assert rx.last_digit == DtmfDigit("6", (0xFFFF + 16000) * 1000 // 8000)


def test_non_dtmf_events_are_ignored() -> None:
    rx = DtmfReceiver()
    assert rx.feed(10, bytes(TelephoneEvent(70, True, 10, 800)), True) is None
    assert rx.last_digit is None


def test_receiver_rejects_malformed_payload() -> None:
    with pytest.raises(CodecError):
        DtmfReceiver().feed(0, b"\x01", True)

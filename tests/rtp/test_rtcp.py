"""RTCP compound parse/serialize (RFC 3550 §6.1, §6.4–§6.6) and NTP helpers."""

from __future__ import annotations

import pytest
from rtp_testutil import golden

from kefu.errors import RtpError
from kefu.rtp.rtcp import (
    Bye,
    ReceiverReport,
    ReportBlock,
    RtcpUnknown,
    Sdes,
    SdesChunk,
    SenderReport,
    ntp_from_unix,
    ntp_middle32,
    parse_compound,
    serialize_compound,
    unix_from_ntp,
)

BLOCK = ReportBlock(
    ssrc=0x55667788,
    fraction_lost=0x40,
    cumulative_lost=5,
    highest_sequence=0x00010010,
    jitter=0x20,
    lsr=0x12345678,
    dlsr=0x00010000,
)


def test_sr_sdes_bye_golden() -> None:
    data = golden("rtcp_sr_sdes_bye.hex")
    packets = parse_compound(data)
    assert packets == [
        SenderReport(
            ssrc=0x11223344,
            ntp_timestamp=0xE000000080000000,
            rtp_timestamp=0x1000,
            packet_count=50,
            octet_count=8000,
            reports=(BLOCK,),
        ),
        Sdes.for_cname(0x11223344, "kefu"),
        Bye((0x11223344,), b"bye"),
    ]
    assert isinstance(packets[1], Sdes) and packets[1].chunks[0].cname == "kefu"
    assert serialize_compound(packets) == data


def test_rr_golden() -> None:
    data = golden("rtcp_rr_empty.hex")
    assert parse_compound(data) == [ReceiverReport(0x11223344)]
    assert bytes(ReceiverReport(0x11223344)) == data


def test_negative_cumulative_lost_round_trips() -> None:
    block = ReportBlock(1, 0, -3, 10, 0, 0, 0)
    rr = ReceiverReport(2, (block,))
    assert parse_compound(bytes(rr)) == [rr]
    assert bytes(rr)[13:16] == b"\xff\xff\xfd"


@pytest.mark.parametrize("cname", ["", "a", "ab", "abc", "abcd", "user@192.0.2.1", "客服"])
def test_sdes_padding_round_trip(cname: str) -> None:
    sdes = Sdes.for_cname(7, cname)
    data = bytes(sdes)
    assert len(data) % 4 == 0
    parsed = parse_compound(data)
    assert parsed == [sdes]


def test_multi_chunk_sdes_and_items() -> None:
    sdes = Sdes(
        (
            SdesChunk(1, ((1, b"one"), (6, b"kefu 0.1"))),
            SdesChunk(2, ((1, b"two"),)),
        )
    )
    assert parse_compound(bytes(sdes)) == [sdes]


def test_bye_without_reason_and_padded_reason() -> None:
    for bye in (Bye((1, 2)), Bye((1,), b"hangup")):
        assert parse_compound(bytes(bye)) == [bye]


def test_unknown_packet_types_pass_through() -> None:
    # A PSFB PLI (RFC 4585 §6.3.1) as a WebRTC peer might append to its report.
    pli = bytes.fromhex("81 ce 00 02 00 00 00 01 00 00 00 02")
    data = bytes(ReceiverReport(1)) + pli
    packets = parse_compound(data)
    assert packets[1] == RtcpUnknown(206, 1, bytes.fromhex("00 00 00 01 00 00 00 02"))
    assert serialize_compound(packets) == data


def test_padded_rtcp_packet() -> None:
    # RR with P set: 4 padding octets, the last holding the count.
    data = bytes.fromhex("a0 c9 00 02 00 00 00 09 00 00 00 04")
    assert parse_compound(data) == [ReceiverReport(9)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80\xc8", "too short"),
        (bytes.fromhex("40 c9 00 01 00 00 00 01"), "version 1"),
        (bytes.fromhex("80 c9 00 05 00 00 00 01"), "overruns"),
        (bytes.fromhex("81 c9 00 01 00 00 00 01"), "report count 1 overruns"),
        (bytes.fromhex("80 c8 00 01 00 00 00 01"), "SR too short"),
        (bytes.fromhex("81 ca 00 01 00 00 00 01"), "not terminated"),
        (bytes.fromhex("81 ca 00 02 00 00 00 01 01 09 61 62"), "item type 1 overruns"),
        (bytes.fromhex("82 cb 00 01 00 00 00 01"), "BYE source count 2"),
        (bytes.fromhex("81 cb 00 02 00 00 00 01 09 61 62 63"), "reason length 9"),
        (bytes.fromhex("80 c9 00 01 00 00 00 01 80"), "trailing 1 bytes"),
        (bytes.fromhex("80 64 00 01 00 00 00 01"), "outside 192..223"),
        (bytes.fromhex("a0 c9 00 01 00 00 00 09"), "bad RTCP padding"),
    ],
)
def test_malformed(data: bytes, message: str) -> None:
    with pytest.raises(RtpError, match=message):
        parse_compound(data)


def test_too_many_blocks_rejected() -> None:
    with pytest.raises(ValueError, match="31"):
        ReceiverReport(1, (BLOCK,) * 32)


def test_ntp_helpers() -> None:
    # 2001-09-09T01:46:40Z = 1e9 Unix seconds; NTP seconds add 2208988800.
    ntp = ntp_from_unix(1_000_000_000.5)
    assert ntp >> 32 == 1_000_000_000 + 2_208_988_800
    assert ntp & 0xFFFFFFFF == 0x80000000
    assert unix_from_ntp(ntp) == pytest.approx(1_000_000_000.5)
    assert ntp_middle32(0x1122334455667788) == 0x33445566

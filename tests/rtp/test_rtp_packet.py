"""RTP packet parse/serialize against golden bytes (RFC 3550 §5.1) and RFC 5761 demux."""

from __future__ import annotations

import pytest
from rtp_testutil import golden

from kefu.errors import RemoteError, RtpError
from kefu.rtp.packet import RtpExtension, RtpPacket, is_rtcp


def test_pcmu_golden() -> None:
    data = golden("rtp_pcmu.hex")
    pkt = RtpPacket.parse(data)
    assert pkt == RtpPacket(
        payload_type=0,
        sequence_number=12345,
        timestamp=1000,
        ssrc=0x12345678,
        payload=b"\xff\xfe\xfd\xfc",
    )
    assert bytes(pkt) == data


def test_marker_golden() -> None:
    data = golden("rtp_dtmf_marker.hex")
    pkt = RtpPacket.parse(data)
    assert pkt.marker and pkt.payload_type == 101
    assert (pkt.sequence_number, pkt.timestamp, pkt.ssrc) == (7, 8000, 0xCAFEBABE)
    assert pkt.serialize() == data


def test_csrc_extension_padding_golden() -> None:
    data = golden("rtp_csrc_ext_pad.hex")
    pkt = RtpPacket.parse(data)
    assert pkt.csrc == (2, 3)
    assert pkt.extension == RtpExtension(0xBEDE, b"\x10\xff\x00\x00")
    assert pkt.padding == 3
    assert pkt.payload == b"\xaa\xbb"
    assert (pkt.sequence_number, pkt.timestamp, pkt.payload_type) == (0xFFFF, 0xFFFFFFFF, 96)
    assert bytes(pkt) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short"),
        (bytes.fromhex("80 00 00 01 00 00 00 00 00 00 00"), "too short"),
        (bytes.fromhex("40 00 00 01 00 00 00 00 00 00 00 01"), "version 1"),
        (bytes.fromhex("00 00 00 01 00 00 00 00 00 00 00 01 ff"), "version 0"),
        (bytes.fromhex("83 00 00 01 00 00 00 00 00 00 00 01 00 00 00 02"), "CSRC count 3"),
        (bytes.fromhex("90 00 00 01 00 00 00 00 00 00 00 01 be de"), "extension flagged"),
        (
            bytes.fromhex("90 00 00 01 00 00 00 00 00 00 00 01 be de 00 02 00 00 00 00"),
            "extension length 2",
        ),
        (bytes.fromhex("a0 00 00 01 00 00 00 00 00 00 00 01 aa 00"), "bad padding length 0"),
        (bytes.fromhex("a0 00 00 01 00 00 00 00 00 00 00 01 aa 05"), "bad padding length 5"),
    ],
)
def test_malformed(data: bytes, message: str) -> None:
    with pytest.raises(RtpError, match=message) as info:
        RtpPacket.parse(data)
    assert isinstance(info.value, RemoteError) and isinstance(info.value, ValueError)


def test_padding_may_consume_the_whole_payload() -> None:
    data = bytes.fromhex("a0 00 00 01 00 00 00 00 00 00 00 01 00 00 00 04")
    pkt = RtpPacket.parse(data)
    assert pkt.payload == b"" and pkt.padding == 4
    assert bytes(pkt) == data


def test_field_ranges_are_checked() -> None:
    with pytest.raises(ValueError, match="payload type"):
        RtpPacket(payload_type=128, sequence_number=0, timestamp=0, ssrc=0)
    with pytest.raises(ValueError, match="sequence"):
        RtpPacket(payload_type=0, sequence_number=1 << 16, timestamp=0, ssrc=0)
    with pytest.raises(ValueError, match="CSRC"):
        RtpPacket(payload_type=0, sequence_number=0, timestamp=0, ssrc=0, csrc=(0,) * 16)
    with pytest.raises(ValueError, match="multiple of 4"):
        RtpExtension(0xBEDE, b"\x00")


@pytest.mark.parametrize("second", [0x00, 0x08, 0x60, 0x7F, 0x80, 0xE5, 0xBF + 0x21])
def test_is_rtcp_false_for_rtp(second: int) -> None:
    assert not is_rtcp(bytes([0x80, second]) + bytes(10))


@pytest.mark.parametrize("packet_type", [192, 200, 201, 202, 203, 204, 205, 206, 207, 223])
def test_is_rtcp_true_for_rtcp(packet_type: int) -> None:
    assert is_rtcp(bytes([0x80, packet_type, 0, 1]) + bytes(4))


def test_is_rtcp_short() -> None:
    assert not is_rtcp(b"\x80")

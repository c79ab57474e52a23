"""loadtest.pcap: RTP packetisation, DTMF insertion, pcap writing/reading, test signal."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from kefu.errors import CodecError
from loadtest.pcap import (
    LINKTYPE_ETHERNET,
    PCMA,
    PCMU,
    TELEPHONE_EVENT,
    DtmfEvent,
    g711_decode,
    g711_encode,
    make_rtp_pcap,
    make_speech_wav,
    read_capture,
    read_pcap,
    read_wav,
    rtp_packets_from_pcm,
    speech_like_pcm,
    udp_frame,
    write_pcap,
    write_rtp_pcap,
)

GOLDEN = Path(__file__).resolve().parent / "golden"


def _rtp_fields(pkt: bytes) -> tuple[int, bool, int, int, int]:
    first, second, seq, ts, ssrc = struct.unpack_from("!BBHII", pkt)
    assert first == 0x80
    return second & 0x7F, bool(second & 0x80), seq, ts, ssrc


@pytest.mark.parametrize("pt", [PCMU, PCMA])
def test_g711_matches_audioop(pt: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop  # the CPython reference implementation, gone in 3.13

    if not hasattr(audioop, "lin2ulaw"):
        pytest.skip("audioop unavailable")
    x = np.arange(-32768, 32768, 7, dtype=np.int16)
    ref = (audioop.lin2ulaw if pt == PCMU else audioop.lin2alaw)(x.astype("<i2").tobytes(), 2)
    assert g711_encode(x, pt) == ref
    codes = bytes(range(256))
    back = (audioop.ulaw2lin if pt == PCMU else audioop.alaw2lin)(codes, 2)
    assert g711_decode(codes, pt).astype("<i2").tobytes() == back


def test_g711_rejects_other_payload_types() -> None:
    with pytest.raises(ValueError, match="0 or 8"):
        g711_encode(np.zeros(160, np.int16), 9)
    with pytest.raises(ValueError, match="0 or 8"):
        g711_decode(b"\x00" * 160, 18)


def test_packets_are_paced_20ms_with_consecutive_headers(speech: np.ndarray) -> None:
    packets = rtp_packets_from_pcm(speech, payload_type=PCMA, first_seq=65534, ssrc=42)
    assert len(packets) == 50
    for i, (offset, pkt) in enumerate(packets):
        pt, marker, seq, ts, ssrc = _rtp_fields(pkt)
        assert offset == pytest.approx(i * 0.020)
        assert (pt, marker, ssrc) == (PCMA, i == 0, 42)
        assert seq == (65534 + i) & 0xFFFF  # wraps
        assert ts == 160_000 + 160 * i
        assert len(pkt) == 12 + 160
    assert (
        g711_decode(packets[3][1][12:], PCMA).tolist()
        == g711_decode(g711_encode(speech[480:640], PCMA), PCMA).tolist()
    )


def test_short_last_packet_is_padded_with_silence() -> None:
    packets = rtp_packets_from_pcm(np.full(170, 1000, np.int16))
    assert len(packets) == 2
    tail = g711_decode(packets[1][1][12:], PCMU)
    assert len(tail) == 160 and tail[:10].min() > 900 and abs(int(tail[10:].max())) < 10


def test_dtmf_event_replaces_audio_slots() -> None:
    pcm = speech_like_pcm(1.0)
    packets = rtp_packets_from_pcm(pcm, dtmf=[DtmfEvent("5", at=0.5, duration=0.1, volume=7)])
    assert len(packets) == 50
    fields = [_rtp_fields(p) for _, p in packets]
    assert [f[2] for f in fields] == list(range(1000, 1050))  # one sequence space
    event_slots = [i for i, f in enumerate(fields) if f[0] == TELEPHONE_EVENT]
    assert event_slots == list(range(25, 32))  # 4 updates + 3 end packets
    assert {fields[i][3] for i in event_slots} == {160_000 + 25 * 160}
    assert [fields[i][1] for i in event_slots] == [True] + [False] * 6
    payloads = [packets[i][1][12:] for i in event_slots]
    events = [struct.unpack("!BBH", p) for p in payloads]
    assert {e[0] for e in events} == {5}
    assert [bool(e[1] & 0x80) for e in events] == [False] * 4 + [True] * 3
    assert {e[1] & 0x3F for e in events} == {7}
    assert [e[2] for e in events] == [160, 320, 480, 640, 800, 800, 800]
    # audio resumes on its own timeline
    assert fields[32][0] == PCMU and fields[32][3] == 160_000 + 32 * 160


def test_dtmf_past_the_audio_extends_the_stream() -> None:
    packets = rtp_packets_from_pcm(np.zeros(160, np.int16), dtmf=[DtmfEvent("#", at=0.04)])
    assert [_rtp_fields(p)[0] for _, p in packets] == [PCMU, PCMU] + [TELEPHONE_EVENT] * 7


def test_dtmf_errors() -> None:
    with pytest.raises(CodecError):
        rtp_packets_from_pcm(np.zeros(800, np.int16), dtmf=[DtmfEvent("x", at=0.0)])
    with pytest.raises(ValueError, match="overlaps"):
        rtp_packets_from_pcm(
            np.zeros(8000, np.int16), dtmf=[DtmfEvent("1", at=0.1), DtmfEvent("2", at=0.16)]
        )


def _ipv4_checksum_ok(header: bytes) -> bool:
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def test_pcap_file_layout(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    payloads = [b"\x80\x00" + bytes(10) + b"a" * 160, b"\x80\x00" + bytes(10) + b"b" * 3]
    n = write_rtp_pcap(
        path, [(0.0, payloads[0]), (0.0205, payloads[1])], src=("10.0.0.1", 4000),
        dst=("127.0.0.1", 6000), epoch=1000.5,
    )  # fmt: skip
    data = path.read_bytes()
    assert n == 2
    assert data[:4] == b"\xd4\xc3\xb2\xa1"  # a1b2c3d4 written little-endian
    assert struct.unpack_from("<HHiIII", data, 4) == (2, 4, 0, 0, 65535, LINKTYPE_ETHERNET)
    sec, usec, incl, orig = struct.unpack_from("<IIII", data, 24)
    assert (sec, usec, incl, orig) == (1000, 500000, 14 + 20 + 8 + 172, 14 + 20 + 8 + 172)
    frames = read_pcap(path)
    assert [round(ts, 6) for ts, _ in frames] == [1000.5, 1000.5205]
    for (_, frame), payload in zip(frames, payloads, strict=True):
        assert frame[12:14] == b"\x08\x00"
        ip = frame[14:34]
        assert ip[0] == 0x45 and ip[9] == 17 and _ipv4_checksum_ok(ip)
        assert struct.unpack_from("!H", ip, 2)[0] == 20 + 8 + len(payload)
        assert ip[12:16] == bytes([10, 0, 0, 1]) and ip[16:20] == bytes([127, 0, 0, 1])
        sport, dport, ulen, csum = struct.unpack_from("!HHHH", frame, 34)
        assert (sport, dport, ulen, csum) == (4000, 6000, 8 + len(payload), 0)
        assert frame[42:] == payload


def test_golden_pcap(tmp_path: Path) -> None:
    """Byte-for-byte: a change here changes what SIPp replays in every media test."""
    path = tmp_path / "tiny.pcap"
    t = np.arange(400) / 8000
    pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    make_rtp_pcap(path, pcm, dtmf=[DtmfEvent("1", at=0.06, duration=0.04)])
    golden = GOLDEN / "tiny_pcmu_dtmf1.pcap"
    if os.environ.get("KEFU_REGEN_GOLDEN") == "1":
        golden.write_bytes(path.read_bytes())
    assert path.read_bytes() == golden.read_bytes()


def test_tshark_decodes_generated_pcap(tmp_path: Path) -> None:
    """An independent dissector agrees on every RTP and RFC 4733 field."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    path = tmp_path / "d.pcap"
    make_rtp_pcap(path, speech_like_pcm(0.2), dtmf=[DtmfEvent("0", at=0.1, duration=0.04)])
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", "udp.port==6000,rtp", "-T", "fields",
         "-e", "rtp.p_type", "-e", "rtp.seq", "-e", "rtp.marker", "-e", "rtpevent.event_id",
         "-e", "rtpevent.end_of_event", "-e", "rtpevent.duration", "-e", "_ws.expert"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    rows = [line.split("\t") for line in out.rstrip("\n").split("\n")]
    assert len(rows) == 10
    assert all(r[6] == "" for r in rows), "tshark flagged a malformed packet"
    assert [r[0] for r in rows] == ["0"] * 5 + ["101"] * 4 + ["0"]
    assert [int(r[1]) for r in rows] == list(range(1000, 1010))
    assert [r[2] for r in rows] == ["1", "0", "0", "0", "0", "1", "0", "0", "0", "0"]
    assert [(r[3], r[4], r[5]) for r in rows[5:9]] == [("0", "0", "160")] + [("0", "1", "320")] * 3


def _pcapng(frames: list[tuple[int, bytes]], tsresol: int) -> bytes:
    def block(btype: int, body: bytes) -> bytes:
        body += bytes(-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    opts = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
    idb = block(1, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 65535) + opts)
    epbs = b"".join(
        block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(f), len(f)) + f)
        for ticks, f in frames
    )
    return shb + idb + epbs


def test_reads_pcapng_with_nanosecond_resolution(tmp_path: Path) -> None:
    frame = udp_frame(("127.0.0.1", 1), ("127.0.0.1", 2), b"hello")
    path = tmp_path / "x.pcapng"
    path.write_bytes(_pcapng([(1_700_000_000_123_456_789, frame), (5, frame)], tsresol=9))
    cap = read_capture(path)
    assert cap.linktype == LINKTYPE_ETHERNET
    assert [f for _, f in cap.frames] == [frame, frame]
    assert cap.frames[0][0] == pytest.approx(1_700_000_000.123456789, abs=1e-6)
    assert cap.frames[1][0] == pytest.approx(5e-9)


def test_reads_big_endian_nanosecond_pcap(tmp_path: Path) -> None:
    frame = udp_frame(("127.0.0.1", 1), ("127.0.0.1", 2), b"x")
    data = struct.pack(">IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    data += struct.pack(">IIII", 7, 250_000_000, len(frame), len(frame)) + frame
    path = tmp_path / "be.pcap"
    path.write_bytes(data)
    assert read_pcap(path) == [(7.25, frame)]


def test_read_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError, match="not a pcap"):
        read_pcap(bad)
    truncated = tmp_path / "t.pcap"
    write_pcap(truncated, [(1.0, b"z" * 50)])
    truncated.write_bytes(truncated.read_bytes()[:-10])
    with pytest.raises(ValueError, match="truncated"):
        read_pcap(truncated)


def test_speech_signal_is_deterministic_and_speech_like() -> None:
    a, b = speech_like_pcm(3.0), speech_like_pcm(3.0)
    assert np.array_equal(a, b) and len(a) == 24000 and a.dtype == np.int16
    assert 11000 <= np.abs(a).max() <= 12000
    # syllables and pauses: the 20 ms energy varies a lot, and some frames are silent
    energy = (a.astype(np.float64).reshape(-1, 160) ** 2).mean(axis=1)
    assert (energy < 1e-3 * energy.max()).sum() >= 5
    assert (energy > 0.1 * energy.max()).sum() >= 30
    # voiced: most energy between 80 and 1500 Hz
    spectrum = np.abs(np.fft.rfft(a.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(a), 1 / 8000)
    assert spectrum[(freqs > 80) & (freqs < 1500)].sum() > 0.9 * spectrum.sum()


def test_speech_wav_round_trip(tmp_path: Path) -> None:
    path = make_speech_wav(tmp_path / "s.wav", 0.5)
    pcm, rate = read_wav(path)
    assert rate == 8000 and np.array_equal(pcm, speech_like_pcm(0.5))

"""loadtest.rtpcap on synthetic captures whose loss, jitter and audio are known exactly."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from loadtest.pcap import (
    LINKTYPE_LINUX_SLL,
    PCMA,
    PCMU,
    DtmfEvent,
    g711_decode,
    g711_encode,
    rtp_packets_from_pcm,
    speech_like_pcm,
    udp_frame,
    write_pcap,
)
from loadtest.rtpcap import (
    echo_delay_and_similarity,
    find_stream,
    parse_rtp,
    rtp_streams,
    udp_datagrams,
)

A = ("127.0.0.1", 6000)
B = ("127.0.0.1", 16000)
T0 = 1_700_000_000.0


def _capture(
    path: Path,
    packets: list[tuple[float, bytes]],
    *,
    src: tuple[str, int] = A,
    dst: tuple[str, int] = B,
    extra: list[tuple[float, bytes]] | None = None,
) -> Path:
    frames = [(T0 + t, udp_frame(src, dst, p)) for t, p in packets] + (extra or [])
    write_pcap(path, sorted(frames, key=lambda f: f[0]))
    return path


def test_clean_stream(tmp_path: Path, speech: np.ndarray) -> None:
    cap = _capture(tmp_path / "c.pcap", rtp_packets_from_pcm(speech))
    streams = rtp_streams(cap)
    assert len(streams) == 1
    (key, stream), = streams.items()  # fmt: skip
    assert (key.src, key.dst, key.ssrc) == (A, B, 0x4B454655)
    s = stream.stats()
    assert (s.packets, s.expected, s.lost, s.duplicates, s.reordered) == (50, 50, 0, 0, 0)
    assert s.jitter_ms == pytest.approx(0, abs=1e-6) and s.max_jitter_ms < 1e-6
    assert s.payload_types == {PCMU: 50}
    assert s.duration_s == pytest.approx(0.98)


def test_loss_duplicates_reordering_and_wrap(tmp_path: Path, speech: np.ndarray) -> None:
    pkts = rtp_packets_from_pcm(speech, first_seq=65520)  # crosses 65535 -> 0
    sent = [p for i, p in enumerate(pkts) if i not in (10, 20, 21)]  # 3 lost
    sent.append((0.5005, pkts[25][1]))  # a duplicate
    sent[30], sent[31] = (sent[30][0], sent[31][1]), (sent[31][0], sent[30][1])  # swapped
    cap = _capture(tmp_path / "l.pcap", sent)
    s = find_stream(rtp_streams(cap), src_port=6000).stats()
    assert s.packets == 48
    assert s.expected == 50
    assert s.lost == 3
    assert s.duplicates == 1
    assert s.reordered == 1


def test_jitter_follows_rfc3550_estimator(tmp_path: Path, speech: np.ndarray) -> None:
    """Arrivals alternately 2 ms late and on time: every transit difference is 2 ms, so the
    A.8 estimate after n differences is 2 ms * (1 - (15/16)^n)."""
    pkts = rtp_packets_from_pcm(speech)
    jittered = [(t + (0.002 if i % 2 else 0.0), p) for i, (t, p) in enumerate(pkts)]
    s = rtp_streams(_capture(tmp_path / "j.pcap", jittered))
    stats = next(iter(s.values())).stats()
    expected = 2.0 * (1 - (15 / 16) ** (len(pkts) - 1))
    assert stats.jitter_ms == pytest.approx(expected, rel=1e-6)
    assert stats.max_jitter_ms == pytest.approx(expected, rel=1e-6)


def test_jitter_ignores_telephone_events(tmp_path: Path, speech: np.ndarray) -> None:
    pkts = rtp_packets_from_pcm(speech, dtmf=[DtmfEvent("9", at=0.3)])
    stream = next(iter(rtp_streams(_capture(tmp_path / "d.pcap", pkts)).values()))
    assert stream.stats().jitter_ms == pytest.approx(0, abs=1e-6)
    assert stream.dtmf_digits() == "9"


@pytest.mark.parametrize("pt", [PCMU, PCMA])
def test_pcm_decodes_what_was_sent(tmp_path: Path, speech: np.ndarray, pt: int) -> None:
    pkts = rtp_packets_from_pcm(speech, payload_type=pt)
    stream = next(iter(rtp_streams(_capture(tmp_path / "p.pcap", pkts)).values()))
    assert stream.audio_payload_type == pt
    assert np.array_equal(stream.pcm(), g711_decode(g711_encode(speech, pt), pt))


def test_pcm_leaves_silence_where_packets_were_lost(tmp_path: Path, speech: np.ndarray) -> None:
    pkts = rtp_packets_from_pcm(speech)
    del pkts[5]
    pcm = next(iter(rtp_streams(_capture(tmp_path / "g.pcap", pkts)).values())).pcm()
    assert len(pcm) == 8000
    assert not pcm[800:960].any()
    assert pcm[640:800].any() and pcm[960:1120].any()


def test_two_digits_and_end_retransmissions_counted_once(tmp_path: Path) -> None:
    pkts = rtp_packets_from_pcm(
        np.zeros(8000, np.int16), dtmf=[DtmfEvent("0", at=0.2), DtmfEvent("#", at=0.6)]
    )
    stream = next(iter(rtp_streams(_capture(tmp_path / "t.pcap", pkts)).values()))
    assert stream.dtmf_digits() == "0#"


def test_non_rtp_is_ignored_and_ports_filter(tmp_path: Path, speech: np.ndarray) -> None:
    sip = b"INVITE sip:service@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP x\r\n\r\n"
    rtcp_rr = struct.pack("!BBHI", 0x80, 201, 1, 0x1234)
    other = rtp_packets_from_pcm(speech[:1600], ssrc=7)
    extra = [
        (T0 + 0.001, udp_frame(("127.0.0.1", 5061), ("127.0.0.1", 5070), sip)),
        (T0 + 0.002, udp_frame(("127.0.0.1", 6001), ("127.0.0.1", 16001), rtcp_rr)),
    ] + [(T0 + t, udp_frame(("127.0.0.1", 7000), ("127.0.0.1", 17000), p)) for t, p in other]
    cap = _capture(tmp_path / "m.pcap", rtp_packets_from_pcm(speech), extra=extra)
    assert parse_rtp(sip) is None and parse_rtp(rtcp_rr) is None
    assert len(udp_datagrams(cap)) == 50 + 2 + 10
    assert {k.ssrc for k in rtp_streams(cap)} == {0x4B454655, 7}
    assert {k.ssrc for k in rtp_streams(cap, ports=[16000])} == {0x4B454655}
    with pytest.raises(LookupError):
        find_stream(rtp_streams(cap), dst_port=1)


def test_linux_cooked_capture(tmp_path: Path, speech: np.ndarray) -> None:
    """`tshark -i any` captures have Linux SLL headers instead of Ethernet."""
    frames = []
    for t, p in rtp_packets_from_pcm(speech[:800]):
        ip_udp = udp_frame(A, B, p)[14:]
        sll = struct.pack("!HHH8sH", 0, 772, 0, b"", 0x0800)
        frames.append((T0 + t, sll + ip_udp))
    path = tmp_path / "sll.pcap"
    write_pcap(path, frames, linktype=LINKTYPE_LINUX_SLL)
    (key, stream), = rtp_streams(path).items()  # fmt: skip
    assert key.src == A and len(stream.packets) == 5


def test_echo_delay_and_similarity(speech: np.ndarray) -> None:
    longer = speech_like_pcm(2.0)
    delayed = np.concatenate([np.zeros(960, np.int16), longer])  # 120 ms
    noise = np.random.default_rng(1).normal(0, 300, len(delayed)).astype(np.int16)
    delay, corr = echo_delay_and_similarity(longer, delayed + noise)
    assert delay == pytest.approx(120.0)
    assert corr > 0.95
    other = speech_like_pcm(2.0, seed=99)
    _, corr_other = echo_delay_and_similarity(longer, np.concatenate([np.zeros(960), other]))
    assert abs(corr_other) < 0.3
    assert echo_delay_and_similarity(longer, np.zeros(0, np.int16)) == (0.0, 0.0)
    assert echo_delay_and_similarity(longer, np.zeros(100, np.int16))[1] == 0.0


def test_echo_measured_from_a_capture(tmp_path: Path) -> None:
    """A symmetric echo 80 ms late, with its own SSRC and timestamps, as kefu would send it."""
    pcm = speech_like_pcm(1.5)
    out = rtp_packets_from_pcm(pcm)
    back = [(t + 0.080, p) for t, p in rtp_packets_from_pcm(pcm, ssrc=99, first_timestamp=5)]
    frames = [(T0 + t, udp_frame(A, B, p)) for t, p in out]
    frames += [(T0 + t, udp_frame(B, A, p)) for t, p in back]
    path = tmp_path / "e.pcap"
    write_pcap(path, sorted(frames, key=lambda f: f[0]))
    streams = rtp_streams(path)
    sent = find_stream(streams, src_port=6000).pcm_by_arrival(T0)
    received = find_stream(streams, dst_port=6000).pcm_by_arrival(T0)
    delay, corr = echo_delay_and_similarity(sent, received)
    assert delay == pytest.approx(80.0)
    assert corr > 0.99


def test_a_late_first_packet_does_not_shift_the_echo(tmp_path: Path) -> None:
    pcm = speech_like_pcm(1.0)
    back = [(t + 0.040, p) for t, p in rtp_packets_from_pcm(pcm, ssrc=5)]
    back[0] = (back[0][0] + 0.070, back[0][1])  # first echo packet held up 70 ms
    frames = [(T0 + t, udp_frame(A, B, p)) for t, p in rtp_packets_from_pcm(pcm)]
    frames += [(T0 + t, udp_frame(B, A, p)) for t, p in back]
    path = tmp_path / "late.pcap"
    write_pcap(path, sorted(frames, key=lambda f: f[0]))
    streams = rtp_streams(path)
    sent, echoed = find_stream(streams, src_port=6000), find_stream(streams, dst_port=6000)
    delay, corr = echo_delay_and_similarity(sent.pcm_by_arrival(T0), echoed.pcm_by_arrival(T0))
    assert delay == pytest.approx(40.0) and corr > 0.99
    # per packet, the late (silent) one lands 70 ms off, over another packet's audio
    raw = echoed.pcm_by_arrival(T0, per_packet=True)
    assert len(raw) == len(echoed.pcm_by_arrival(T0))
    assert not np.array_equal(raw, echoed.pcm_by_arrival(T0))
    on_time = find_stream(streams, src_port=6000)
    assert np.array_equal(on_time.pcm_by_arrival(T0, per_packet=True), sent.pcm_by_arrival(T0))

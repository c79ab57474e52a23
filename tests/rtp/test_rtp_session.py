"""Sans-IO RtpSession: latching, receive stats, DTMF, RTCP timers — time advanced by hand."""

from __future__ import annotations

import random

import pytest

from kefu.rtp.packet import RtpPacket
from kefu.rtp.rtcp import ReceiverReport, Sdes, SenderReport, parse_compound
from kefu.rtp.session import (
    AudioPacket,
    DtmfReceived,
    RtcpReceived,
    RtpSession,
    SourceLatched,
)

PEER = ("192.0.2.10", 4000)
OTHER = ("192.0.2.66", 4000)
PEER_OTHER_PORT = ("192.0.2.10", 4002)


def make(**kw: object) -> RtpSession:
    args: dict[str, object] = {
        "payload_type": 0,
        "clock_rate": 8000,
        "dtmf_payload_type": 101,
        "remote": PEER,
        "rng": random.Random(1),
        "wall_offset": 1_700_000_000.0,
    }
    args.update(kw)
    return RtpSession(**args)  # type: ignore[arg-type]


def rtp(
    seq: int, ts: int | None = None, ssrc: int = 0xABC, pt: int = 0, marker: bool = False
) -> bytes:
    return bytes(
        RtpPacket(
            payload_type=pt,
            sequence_number=seq & 0xFFFF,
            timestamp=(160 * seq if ts is None else ts) & 0xFFFFFFFF,
            ssrc=ssrc,
            payload=b"\xff" * 160,
            marker=marker,
        )
    )


# --- latching ----------------------------------------------------------------------------


def test_latches_to_first_valid_packet_and_drops_others() -> None:
    s = make()
    assert s.remote_address == PEER  # SDP address before any media
    events = s.receive_datagram(rtp(1), PEER_OTHER_PORT, 0.0)
    assert events[0] == SourceLatched(PEER_OTHER_PORT, 0xABC, relatched=False)
    assert isinstance(events[1], AudioPacket)
    assert s.remote_address == PEER_OTHER_PORT  # symmetric RTP: answer where it came from
    assert s.receive_datagram(rtp(2), PEER, 0.02) == []
    assert s.receive_datagram(rtp(3, ssrc=0x999), OTHER, 0.04) == []
    st = s.stats
    assert st.dropped_unlatched == 2
    assert st.packets_received == 1
    assert st.latched_address == PEER_OTHER_PORT


def test_garbage_is_counted_not_latched() -> None:
    s = make()
    for junk in (b"", b"\x00" * 40, b"hello world, not rtp", b"\x80\x00\x00"):
        assert s.receive_datagram(junk, OTHER, 0.0) == []
    assert s.stats.dropped_malformed == 4
    assert s.stats.latched_address is None
    s.receive_datagram(rtp(1), PEER, 0.0)
    assert s.stats.latched_address == PEER


def test_unknown_payload_type_does_not_latch() -> None:
    s = make()
    assert s.receive_datagram(rtp(1, pt=13), OTHER, 0.0) == []  # comfort noise: not ours
    assert s.stats.latched_address is None
    s.receive_datagram(rtp(2), PEER, 0.02)
    assert s.stats.latched_address == PEER
    assert s.receive_datagram(rtp(3, pt=13), PEER, 0.04) == []
    assert s.stats.dropped_unknown_payload == 1


def test_symmetric_relatch_needs_new_ssrc_and_silence() -> None:
    s = make(latching="symmetric", relatch_after=2.0)
    s.receive_datagram(rtp(1), PEER, 0.0)
    # New SSRC, but the latched peer spoke 1 s ago: an injection, dropped.
    assert s.receive_datagram(rtp(500, ssrc=0x777), OTHER, 1.0) == []
    # Same SSRC from elsewhere after silence: not a new source, dropped.
    assert s.receive_datagram(rtp(2), OTHER, 5.0) == []
    # New SSRC after >= 2 s of silence: the media really moved.
    events = s.receive_datagram(rtp(501, ssrc=0x777), OTHER, 5.0)
    assert events[0] == SourceLatched(OTHER, 0x777, relatched=True)
    assert s.remote_address == OTHER
    assert s.stats.remote_ssrc == 0x777
    assert s.stats.dropped_unlatched == 2
    # the old address is now the stranger
    assert s.receive_datagram(rtp(3), PEER, 5.1) == []


def test_symmetric_relatch_timer_restarts_with_each_packet() -> None:
    s = make(latching="symmetric", relatch_after=2.0)
    for i in range(10):
        s.receive_datagram(rtp(i), PEER, 0.5 * i)  # keeps talking till t=4.5
    assert s.receive_datagram(rtp(900, ssrc=0x777), OTHER, 6.0) == []
    assert s.receive_datagram(rtp(901, ssrc=0x777), OTHER, 6.5)[0] == SourceLatched(
        OTHER, 0x777, relatched=True
    )


def test_symmetric_latches_to_a_stranger_that_speaks_first() -> None:
    """The old behaviour, kept for callers whose SDP names an address they cannot be reached
    at (a private address behind NAT): whoever speaks first wins."""
    s = make(latching="symmetric")
    events = s.receive_datagram(rtp(1, ssrc=0x666), OTHER, 0.0)
    assert events[0] == SourceLatched(OTHER, 0x666, relatched=False)
    assert s.remote_address == OTHER
    assert s.receive_datagram(rtp(1), PEER, 0.01) == []


def test_sdp_host_is_the_default_and_a_stranger_cannot_win_the_first_latch() -> None:
    s = make()
    assert s.latching == "sdp_host"
    # An attacker's packet arrives before the caller's first one: dropped, no latch.
    assert s.receive_datagram(rtp(1, ssrc=0x666), OTHER, 0.0) == []
    assert s.stats.latched_address is None
    assert s.remote_address == PEER  # we keep sending where the SDP said
    events = s.receive_datagram(rtp(1), PEER, 0.01)
    assert events[0] == SourceLatched(PEER, 0xABC, relatched=False)
    assert isinstance(events[1], AudioPacket) and events[1].seq == 1
    st = s.stats
    assert (st.dropped_unlatched, st.packets_received, st.latched_address) == (1, 1, PEER)


def test_sdp_host_a_stranger_cannot_take_over_a_silent_call() -> None:
    s = make(relatch_after=2.0)
    s.receive_datagram(rtp(1), PEER, 0.0)
    # The caller is silent (on mute, listening) for far longer than relatch_after; a new
    # SSRC from another host is exactly what a real media move looks like, but not from
    # the host the SDP named, so it is an injection.
    for i, t in enumerate((2.5, 3.0, 10.0, 60.0)):
        assert s.receive_datagram(rtp(500 + i, ssrc=0x666), OTHER, t) == []
    assert s.remote_address == PEER
    st = s.stats
    assert (st.dropped_unlatched, st.latched_address, st.remote_ssrc) == (4, PEER, 0xABC)
    # The caller comes back and is still heard.
    assert isinstance(s.receive_datagram(rtp(2), PEER, 61.0)[0], AudioPacket)


def test_sdp_host_follows_a_nat_rebinding_on_the_same_host() -> None:
    s = make(relatch_after=2.0)
    # First packet from another port of the SDP host (a NAT picked it): latched.
    events = s.receive_datagram(rtp(1), PEER_OTHER_PORT, 0.0)
    assert events[0] == SourceLatched(PEER_OTHER_PORT, 0xABC, relatched=False)
    # While the caller talks, another port of the same host with a new SSRC is refused.
    assert s.receive_datagram(rtp(900, ssrc=0x777), PEER, 1.0) == []
    # After 2 s of silence a new SSRC on a new port of the SDP host: the media moved.
    events = s.receive_datagram(rtp(901, ssrc=0x777), PEER, 3.0)
    assert events[0] == SourceLatched(PEER, 0x777, relatched=True)
    assert s.remote_address == PEER and s.stats.remote_ssrc == 0x777
    # The current SSRC replayed from yet another port: not a new source, refused.
    assert s.receive_datagram(rtp(902, ssrc=0x777), PEER_OTHER_PORT, 10.0) == []
    assert s.stats.dropped_unlatched == 2


def test_sdp_host_compares_hosts_not_spellings() -> None:
    s = make(remote=("2001:DB8:0::1", 4000))
    assert s.receive_datagram(rtp(1, ssrc=0x666), ("2001:db8::2", 4000), 0.0) == []
    events = s.receive_datagram(rtp(1), ("2001:db8::1", 4002, 0, 0), 0.01)  # type: ignore[arg-type]
    assert events[0] == SourceLatched(("2001:db8::1", 4002), 0xABC, relatched=False)
    mapped = make(remote=("192.0.2.10", 4000))  # a dual-stack socket reports v4-mapped
    assert mapped.receive_datagram(rtp(1), ("::ffff:192.0.2.10", 4000), 0.0)
    assert mapped.receive_datagram(rtp(1), ("::ffff:192.0.2.66", 4000), 0.0) == []


def test_sdp_host_without_an_sdp_address_latches_nothing() -> None:
    s = make(remote=None)
    assert s.receive_datagram(rtp(1), PEER, 0.0) == []
    assert s.stats.latched_address is None and s.stats.dropped_unlatched == 1
    s.set_remote(PEER)
    assert s.receive_datagram(rtp(2), PEER, 0.02)[0] == SourceLatched(PEER, 0xABC, False)


def test_unknown_latching_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="sdp_host, symmetric, strict"):
        make(latching="any")


def test_strict_latching_only_accepts_sdp_address() -> None:
    s = make(latching="strict")
    assert s.receive_datagram(rtp(1), PEER_OTHER_PORT, 0.0) == []
    events = s.receive_datagram(rtp(2), PEER, 0.02)
    assert events[0] == SourceLatched(PEER, 0xABC, relatched=False)
    # strict never re-latches, however long the silence
    assert s.receive_datagram(rtp(9, ssrc=0x777), OTHER, 100.0) == []
    assert s.stats.dropped_unlatched == 2


def test_set_remote_unlatches() -> None:
    s = make()
    s.receive_datagram(rtp(1), PEER, 0.0)
    s.set_remote(OTHER)
    assert s.remote_address == OTHER
    events = s.receive_datagram(rtp(2), OTHER, 0.02)
    assert events[0] == SourceLatched(OTHER, 0xABC, relatched=False)


def test_ipv6_four_tuple_addresses_are_normalised() -> None:
    s = make(remote=("::1", 4000))
    s.receive_datagram(rtp(1), ("::1", 4000, 0, 0), 0.0)  # type: ignore[arg-type]
    assert s.receive_datagram(rtp(2), ("::1", 4000, 0, 0), 0.02)  # type: ignore[arg-type]
    assert s.stats.latched_address == ("::1", 4000)


# --- receive statistics ------------------------------------------------------------------


def test_loss_jitter_and_fraction() -> None:
    s = make()
    # 20 packets, 5 and 6 lost, every odd packet 10 ms late.
    for seq in range(20):
        if seq in (5, 6):
            continue
        arrival = 0.02 * seq + (0.01 if seq % 2 else 0.0)
        s.receive_datagram(rtp(seq), PEER, arrival)
    st = s.stats
    assert st.packets_received == 18
    assert st.packets_lost == 2
    assert st.fraction_lost == pytest.approx(2 / 20)
    assert 3.0 < st.jitter_ms < 10.0
    assert st.bytes_received == 18 * 160


def test_audio_events_carry_packet_fields() -> None:
    s = make()
    events = s.receive_datagram(rtp(7, ts=1234, marker=True), PEER, 3.5)
    assert events[-1] == AudioPacket(7, 1234, b"\xff" * 160, True, 3.5)


def test_new_ssrc_from_latched_address_restarts_stats() -> None:
    s = make()
    for seq in range(10):
        s.receive_datagram(rtp(seq), PEER, 0.02 * seq)
    s.receive_datagram(rtp(40000, ssrc=0x555), PEER, 0.3)
    st = s.stats
    assert st.remote_ssrc == 0x555
    assert st.packets_lost == 0


# --- send side ---------------------------------------------------------------------------


def test_packetize_sequences_and_timestamps() -> None:
    s = make(ssrc=0x1234)
    first = RtpPacket.parse(s.packetize(b"\x01" * 160, 160, 0.0, marker=True))
    second = RtpPacket.parse(s.packetize(b"\x02" * 160, 160, 0.02))
    assert first.ssrc == second.ssrc == 0x1234
    assert first.marker and not second.marker
    assert second.sequence_number == (first.sequence_number + 1) & 0xFFFF
    assert second.timestamp == (first.timestamp + 160) & 0xFFFFFFFF
    s.advance_timestamp(800)  # five slots with nothing to send
    third = RtpPacket.parse(s.packetize(b"\x03", 160, 0.2))
    assert third.timestamp == (second.timestamp + 960) & 0xFFFFFFFF
    assert s.stats.packets_sent == 3 and s.stats.bytes_sent == 321


def test_reflect_keeps_the_callers_spacing_under_our_ssrc() -> None:
    s = make(ssrc=0x1234)
    # The caller's sequence wraps, and two packets were lost on the way in.
    incoming = [(65534, 0), (65535, 160), (2, 640), (3, 800)]
    sent = [
        RtpPacket.parse(s.reflect(AudioPacket(seq, ts, bytes([i]) * 160, i == 0, 0.02 * i), 0))
        for i, (seq, ts) in enumerate(incoming)
    ]
    assert {p.ssrc for p in sent} == {0x1234}
    assert [p.payload[0] for p in sent] == [0, 1, 2, 3]
    pairs = list(zip(sent, sent[1:], strict=False))
    assert [(b.sequence_number - a.sequence_number) & 0xFFFF for a, b in pairs] == [1, 3, 1]
    assert [(b.timestamp - a.timestamp) & 0xFFFFFFFF for a, b in pairs] == [160, 480, 160]
    assert sent[0].marker and not sent[1].marker
    assert s.stats.packets_sent == 4


def test_random_initial_values_differ_between_sessions() -> None:
    a = RtpPacket.parse(RtpSession(payload_type=0, clock_rate=8000).packetize(b"", 160, 0))
    b = RtpPacket.parse(RtpSession(payload_type=0, clock_rate=8000).packetize(b"", 160, 0))
    assert (a.ssrc, a.sequence_number, a.timestamp) != (b.ssrc, b.sequence_number, b.timestamp)


def test_dtmf_end_to_end_between_sessions() -> None:
    tx = make(ssrc=0x42)
    rx = make()
    tx.packetize(b"\xff" * 160, 160, 0.0)
    datagrams = tx.dtmf_datagrams("7", 0.02)
    assert len(datagrams) == 7 + 3  # 140 ms of updates, then the end packet thrice
    first = RtpPacket.parse(datagrams[0])
    assert first.marker and first.payload_type == 101
    assert {RtpPacket.parse(d).timestamp for d in datagrams} == {first.timestamp}
    digits = []
    for i, d in enumerate(datagrams):
        for ev in rx.receive_datagram(d, PEER, 0.02 * i):
            if isinstance(ev, DtmfReceived):
                digits.append(ev.digit)
    assert digits == ["7"]
    assert rx.stats.dtmf_received == 1
    # the next audio packet sits after the slots the event used
    after = RtpPacket.parse(tx.packetize(b"\xff" * 160, 160, 0.3))
    assert after.timestamp == (first.timestamp + 160 * len(datagrams)) & 0xFFFFFFFF
    assert after.sequence_number == (first.sequence_number + len(datagrams)) & 0xFFFF


def test_dtmf_without_payload_type_is_refused() -> None:
    with pytest.raises(ValueError, match="telephone-event"):
        make(dtmf_payload_type=None).dtmf_datagrams("1", 0.0)


def test_malformed_telephone_event_counted() -> None:
    s = make()
    bad = bytes(RtpPacket(101, 1, 0, 0xABC, payload=b"\x01"))
    assert s.receive_datagram(bad, PEER, 0.0)[-1:] != [DtmfReceived("1", 0, 0.0)]
    assert s.stats.dropped_malformed == 1


# --- RTCP --------------------------------------------------------------------------------


def test_rtcp_timer_sr_then_rr() -> None:
    s = make(ssrc=0x10)
    assert s.get_timer() is None  # nothing flowed yet
    s.packetize(b"\xff" * 160, 160, 0.0)
    first = s.get_timer()
    assert first is not None and 1.25 <= first <= 3.75  # half of 5 s, randomised 0.5-1.5
    s.handle_timer(first - 0.001)
    assert s.rtcp_to_send() == []
    s.handle_timer(first)
    (compound,) = s.rtcp_to_send()
    packets = parse_compound(compound)
    assert isinstance(packets[0], SenderReport) and packets[0].packet_count == 1
    assert packets[1] == Sdes.for_cname(0x10, s.cname)
    second = s.get_timer()
    assert second is not None and first + 2.5 <= second <= first + 7.5
    s.handle_timer(second)  # nothing sent in between: a receiver report
    packets = parse_compound(s.rtcp_to_send()[0])
    assert isinstance(packets[0], ReceiverReport)


def test_rtcp_round_trip_loss_jitter_rtt() -> None:
    a = make(ssrc=0xA, wall_offset=1000.0)
    # wall clocks need not agree for RTT
    b = make(ssrc=0xB, wall_offset=5000.0, remote=("198.51.100.1", 5000))
    # A sends 50 packets to B; B loses every tenth.
    for i in range(50):
        data = a.packetize(b"\xff" * 160, 160, 0.02 * i)
        if i % 10 != 3:
            b.receive_datagram(data, ("198.51.100.1", 5000), 0.02 * i + 0.05)
    # A's SR reaches B (B stores LSR), B answers 0.1 s later; the path is 0.05 s each way.
    a.handle_timer(10.0)
    (sr,) = a.rtcp_to_send()
    events = b.receive_datagram(sr, ("198.51.100.1", 5001), 10.05)
    assert isinstance(events[0], RtcpReceived)
    b.handle_timer(10.15)
    (rr,) = b.rtcp_to_send()
    block = next(p for p in parse_compound(rr) if isinstance(p, ReceiverReport)).reports[0]
    assert block.ssrc == 0xA and block.cumulative_lost == 5
    assert block.fraction_lost == (5 << 8) // 50
    a.receive_datagram(rr, PEER, 10.2)
    st = a.stats
    assert st.remote_packets_lost == 5
    assert st.remote_fraction_lost == pytest.approx(block.fraction_lost / 256)
    assert st.remote_jitter_ms is not None and st.remote_jitter_ms < 1.0
    assert st.rtt_ms == pytest.approx(100.0, abs=0.1)


def test_rtcp_from_a_stranger_is_dropped() -> None:
    s = make()
    s.receive_datagram(rtp(1), PEER, 0.0)
    rr = bytes(ReceiverReport(0x99))
    assert s.receive_datagram(rr, OTHER, 0.1) == []
    assert s.stats.dropped_unlatched == 1
    # same host, the odd port: accepted, and becomes where our RTCP goes
    assert s.receive_datagram(rr, ("192.0.2.10", 4001), 0.2)
    assert s.rtcp_address == ("192.0.2.10", 4001)
    assert s.receive_datagram(b"\x80\xc9\x00\x09garbage", PEER, 0.3) == []
    assert s.stats.dropped_malformed == 1


def test_rtcp_addresses() -> None:
    assert make().rtcp_address == ("192.0.2.10", 4001)
    assert make(rtcp_mux=True).rtcp_address == PEER
    assert make(remote_rtcp=("192.0.2.10", 7000)).rtcp_address == ("192.0.2.10", 7000)
    assert make(remote=None).rtcp_address is None


def test_bye_is_a_valid_compound() -> None:
    s = make(ssrc=0x77)
    s.packetize(b"\xff", 160, 0.0)
    packets = parse_compound(s.bye(1.0, "hangup"))
    assert [type(p).__name__ for p in packets] == ["SenderReport", "Sdes", "Bye"]


def test_codec_change_keeps_counters() -> None:
    s = make()
    for seq in range(5):
        s.receive_datagram(rtp(seq), PEER, 0.02 * seq)
    s.set_codec(111, 48000, 101)
    events = s.receive_datagram(rtp(5, ts=5000, pt=111), PEER, 0.1)
    assert isinstance(events[-1], AudioPacket)
    assert s.stats.packets_received == 6
    assert s.stats.jitter_ms == 0.0


def test_latching_mode_is_configurable_and_checked() -> None:
    """``rtp.latching`` (docs/CONFIG.md) selects the SIP leg's mode; a typo stops start-up."""
    from kefu.errors import ConfigError
    from kefu.mediaserver.config import load_config

    assert load_config(environ={}).rtp.latching == "sdp_host"
    for mode in ("symmetric", "strict"):
        assert load_config(environ={"KEFU_RTP_LATCHING": mode}).rtp.latching == mode
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"rtp": {"latching": "any"}}, environ={})
    assert caught.value.key == "rtp.latching"

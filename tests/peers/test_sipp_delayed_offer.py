"""Delayed offer (RFC 3261 §13.2.1) against a real ``kefu serve`` (echo mode), with SIPp over
UDP and TCP: the INVITE has no SDP, kefu offers in its 200 OK, the ACK answers.

Media is judged on the wire (tshark on loopback, :mod:`loadtest.rtpcap`): what kefu sends
back must be what the caller sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.kefu_process import KefuProcess
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import SippResult, TsharkCapture, port_is_bound, run_sipp, sipp_media_port
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams

pytestmark = [pytest.mark.netns, pytest.mark.peer]
transports = pytest.mark.parametrize("transport", ["u1", "t1"])


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    path = tmp_path_factory.mktemp("pcap") / "speech.pcap"
    seconds = make_rtp_pcap(path, speech_like_pcm(2.0))  # PCMU, payload type 0
    return path, seconds


def delayed_offer_call(
    kefu: KefuProcess, speech: tuple[Path, float], transport: str, media_port: int
) -> SippResult:
    pcap, seconds = speech
    return run_sipp(
        "uac_delayed_offer",
        kefu.sip,
        transport=transport,
        media_port=media_port,
        keys={"pcap": pcap},
        variables={"audio_ms": int(seconds * 1000)},
        timeout=20,
    )


@transports
def test_delayed_offer_call_echoes_the_callers_audio(kefu, speech, transport: str) -> None:
    media_port = sipp_media_port()
    with TsharkCapture(ports=[media_port]) as capture:
        result = delayed_offer_call(kefu, speech, transport, media_port)
    # SIPp checked the 200's offer (audio m= line, PCMU/8000, telephone-event/8000)
    assert result.ok, result.errors or result.stderr_tail
    answered = kefu.wait_event("delayed_offer_answered")
    assert answered["codec"] == "PCMU" and answered["remote"] == f"127.0.0.1:{media_port}"
    assert answered["call_id"] == kefu.wait_event("delayed_offer_sent")["call_id"]
    assert kefu.wait_event("rtp_started")["call_id"] == answered["call_id"]

    streams = rtp_streams(capture.path, ports=[media_port])
    sent = find_stream(streams, src_port=media_port)
    echoed = find_stream(streams, dst_port=media_port)
    # G.711 echo is byte-exact: the caller's distinct payloads come back, in order, unchanged
    counts: dict[bytes, int] = {}
    for p in sent.packets:
        counts[p.payload] = counts.get(p.payload, 0) + 1
    distinct = [p.payload for p in sent.packets if counts[p.payload] == 1]
    returned = {p.payload for p in echoed.packets}
    assert len(distinct) > 50
    assert sum(p in returned for p in distinct) / len(distinct) > 0.95
    assert {p.payload_type for p in echoed.packets} == {0}
    delay_ms, similarity = echo_delay_and_similarity(sent.pcm(), echoed.pcm())
    assert similarity > 0.5 and delay_ms < 500, (delay_ms, similarity)
    assert echoed.stats().lost == 0
    assert kefu.wait_event("call_ended")["reason"] == "remote hangup"
    assert kefu.metric("kefu_calls_total", 'result="completed"') == 1


@transports
def test_ack_without_answer_gets_bye_and_kefu_serves_the_next_call(
    kefu, speech, transport: str
) -> None:
    # SIPp checks the BYE's Reason: SIP;cause=400;text="no SDP answer in the ACK"
    result = run_sipp("uac_delayed_offer_no_answer", kefu.sip, transport=transport, timeout=15)
    assert result.ok, result.errors or result.stderr_tail
    offered = kefu.wait_event("delayed_offer_sent")
    ended = kefu.wait_event("call_ended")
    assert ended["call_id"] == offered["call_id"]
    assert ended["reason"] == "bad_answer (no SDP answer in the ACK)"
    # everything is freed: the call table, the RTP/RTCP ports, no media ever started
    assert kefu.metric("kefu_active_calls") == 0
    assert kefu.metric("kefu_calls_total", 'result="bad_answer"') == 1
    port = offered["rtp_port"]
    assert not port_is_bound(port) and not port_is_bound(port + 1)
    assert not kefu.events("delayed_offer_answered") and not kefu.events("rtp_started")

    # the server goes on: the next delayed-offer call is answered and completes
    nxt = delayed_offer_call(kefu, speech, transport, sipp_media_port())
    assert nxt.ok, nxt.errors or nxt.stderr_tail
    assert kefu.metric("kefu_calls_total", 'result="completed"') == 1


@transports
def test_offerless_reinvite_is_answered_in_its_ack(kefu, transport: str) -> None:
    # the second ACK's answer holds the call (a=sendonly): kefu must apply it (recvonly)
    result = run_sipp(
        "uac_delayed_offer_reinvite",
        kefu.sip,
        transport=transport,
        media_port=sipp_media_port(),
        timeout=15,
    )
    assert result.ok, result.errors or result.stderr_tail
    answered = kefu.wait_event("delayed_offer_answered")
    held = kefu.wait_event("reinvite")
    assert held["call_id"] == answered["call_id"]
    assert (held["codec"], held["direction"]) == ("PCMU", "recvonly")
    assert kefu.wait_event("call_ended")["reason"] == "remote hangup"

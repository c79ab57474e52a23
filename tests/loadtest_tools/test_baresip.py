"""baresip (a real softphone) calls the SIPp kefu mimic and its RTP is seen on the wire.

Runs only in a private network namespace (see test_sipp_scenarios.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadtest.pcap import make_speech_wav, read_wav
from loadtest.peers import TsharkCapture, baresip_rtp_ports, start_baresip, start_sipp_uas
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams

pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("baresip", "sipp", "tshark")),
        reason="needs baresip, sipp (sip-tester) and tshark",
    ),
]


@pytest.mark.parametrize(
    ("transport", "hangup_after"),
    [("u1", None), ("t1", 1.0)],
    ids=["udp-hangs-up-at-end-of-file", "tcp-hangs-up-after-1s"],
)
def test_baresip_calls_the_mimic(tmp_path: Path, transport: str, hangup_after: float) -> None:
    wav = make_speech_wav(tmp_path / "caller.wav", 1.5)
    rtp_lo, rtp_hi = baresip_rtp_ports()
    uas = start_sipp_uas(transport=transport, variables={"mode": "echo"})
    uri = f"sip:service@127.0.0.1:{uas.port}" + (";transport=tcp" if transport == "t1" else "")
    try:
        with TsharkCapture(ports=[uas.media_port or 0]) as cap:
            phone = start_baresip(uri, wav, hangup_after=hangup_after,
                                  rtp_ports=(rtp_lo, rtp_hi))  # fmt: skip
            with phone:
                assert phone.wait(15) == 0, phone.log
                mimic = uas.stop()
                log = phone.log
                recordings = phone.recordings()
                sent_wav, received_wav = (read_wav(recordings[k])[0] for k in ("enc", "dec"))
        assert mimic.ok and mimic.successful == 1, mimic.errors + mimic.stderr_tail
        assert "Call established" in log and "PCMU" in log

        streams = rtp_streams(cap.path)
        sent = find_stream(streams, dst_port=uas.media_port)
        # an even port of the even-aligned range (baresip 1.0 may use hi + 1 for RTCP)
        assert rtp_lo <= sent.key.src[1] <= rtp_hi and sent.key.src[1] % 2 == 0, sent.key
        echoed = find_stream(streams, src_port=uas.media_port)
        for stream in (sent, echoed):
            stats = stream.stats()
            if hangup_after:
                # -t 1: hung up a second after the answer, before the 1.5 s file ended (75
                # packets). Media starts a little after the answer, later on a loaded box,
                # so the count below 50 is the box's timing, not baresip's.
                assert 10 <= stats.packets <= 56, stats
            else:
                assert 75 <= stats.packets <= 110, stats  # the 1.5 s file, and what aufile buffers
            assert stats.lost == 0 and stream.audio_payload_type == 0

        # baresip's own recordings: what it encoded, and the echo it decoded
        delay, corr = echo_delay_and_similarity(sent_wav, received_wav, max_delay_ms=500)
        assert corr > 0.8 and delay < 200, (delay, corr)
    finally:
        uas.stop()
        cap.cleanup()

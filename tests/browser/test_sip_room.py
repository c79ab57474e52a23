"""A SIPp caller and a WebRTC (aiortc) participant in one room hear each other.

Needs ``calls.sip_room`` (env KEFU_CALLS_SIP_ROOM): every SIP call joins that room as a
participant with role "sip" (its audio published, the room's mix sent down the SIP leg)
instead of being echoed. Until kefu has that wiring the test is an expected failure.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import numpy as np
import pytest
from browser.chromium import kefu_env, token
from conftest import start_kefu

from loadtest.pcap import make_rtp_pcap, speech_like_pcm, write_wav
from loadtest.peers import TsharkCapture, run_sipp, sipp_media_port
from loadtest.rtpcap import find_stream, rtp_streams
from loadtest.webrtc import tracked_correlation
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient, read_wav

pytestmark = [pytest.mark.netns, pytest.mark.peer]

TONE_HZ = 440.0


def dominant_hz(pcm: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    spectrum[:5] = 0  # ignore DC
    return float(np.argmax(spectrum)) * rate / len(pcm)


async def test_sipp_caller_and_webrtc_participant_hear_each_other(tmp_path: Path) -> None:
    room = f"sip-{secrets.token_hex(3)}"
    env, jwt = kefu_env(tmp_path, KEFU_CALLS_SIP_ROOM=room)
    kefu = start_kefu(tmp_path, env=env)
    pcm = speech_like_pcm(3.0)
    pcap = tmp_path / "speech.pcap"
    seconds = make_rtp_pcap(pcap, pcm)
    write_wav(tmp_path / "speech8k.wav", pcm, 8000)
    client = WebRtcClient(mic=PacedPcmTrack.tone(TONE_HZ, seconds=30.0))
    media_port = sipp_media_port()
    try:
        await client.connect_ws(f"ws://127.0.0.1:{kefu.http_port}/ws", room, token=token(jwt, room))
        await asyncio.wait_for(client.connected.wait(), 10)
        with TsharkCapture(ports=[media_port]) as capture:
            result = await asyncio.to_thread(
                run_sipp,
                "uac_echo",
                kefu.sip,
                media_port=media_port,
                keys={"pcap": pcap},
                variables={"audio_ms": int(seconds * 1000)},
                timeout=20,
            )
        tracks = client.heard_by_track()
    finally:
        await client.close()
        kefu.stop()
    assert result.ok, result.errors or result.stderr_tail
    # The WebRTC participant heard the SIP caller's speech on some track: followed window by
    # window, as a lost or late packet on a loaded machine shifts the rest by 20 ms. The same
    # measure against other speech-like audio stays low, so it is this speech, not any.
    sent = read_wav(tmp_path / "speech8k.wav")
    scores = [tracked_correlation(sent, t, max_lag_s=seconds + 2) for t in tracks]
    assert max(scores, default=0.0) > 0.5, scores
    decoy = speech_like_pcm(3.0, 48000, seed=11)
    heard = tracks[int(np.argmax(scores))]
    assert tracked_correlation(decoy, heard, max_lag_s=seconds + 2) < 0.3
    # The SIP caller heard the WebRTC participant's tone (not its own echo).
    streams = rtp_streams(capture.path, ports=[media_port])
    down = find_stream(streams, dst_port=media_port).pcm()
    assert abs(dominant_hz(np.asarray(down), 8000) - TONE_HZ) < 20

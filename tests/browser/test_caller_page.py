"""The caller page (kefu/web/) in real Chromium against a real ``kefu serve``.

Run inside a private network namespace (Chromium looks up Google hosts and joins mDNS):
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/browser -q'``.
Chromium's fake microphone plays a speech-like WAV; kefu's room bot echoes the room's mix.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import numpy as np
import pytest
from browser.chromium import (
    audio_inbound,
    kefu_env,
    page_url,
    require_chromium,
    run_driver,
    token,
)
from conftest import start_kefu

from loadtest.pcap import make_speech_wav, write_wav
from loadtest.webrtc_client import WebRtcClient, read_wav

pytestmark = [pytest.mark.netns, pytest.mark.peer]

SPEECH_S = 3.0


def looped_correlation(period: np.ndarray, heard: np.ndarray) -> float:
    """Peak normalized circular cross-correlation of the last full period of ``heard`` with
    ``period`` (Chromium loops its fake-microphone file)."""
    n = len(period)
    if len(heard) < n + 24000:
        return 0.0
    window = heard[-n - 12000 : -12000].astype(np.float64)
    ref = period.astype(np.float64)
    norm = float(np.sqrt(np.dot(window, window) * np.dot(ref, ref)))
    if norm == 0.0:
        return 0.0
    corr = np.fft.irfft(np.fft.rfft(window) * np.conj(np.fft.rfft(ref)), n)
    return float(np.max(corr)) / norm


@pytest.fixture
def speech_wav(tmp_path: Path) -> Path:
    return make_speech_wav(tmp_path / "speech.wav", SPEECH_S, 48000)


@pytest.fixture
def silent_wav(tmp_path: Path) -> Path:
    path = tmp_path / "silence.wav"
    write_wav(path, np.zeros(48000, np.int16), 48000)
    return path


@pytest.fixture
def server(tmp_path: Path):
    require_chromium()
    env, secret = kefu_env(tmp_path)
    kefu = start_kefu(tmp_path, env=env)
    kefu.secret = secret  # type: ignore[attr-defined]
    yield kefu
    kefu.stop()


async def test_call_connects_kefu_hears_it_and_the_browser_hears_the_echo(
    server, tmp_path: Path, speech_wav: Path
) -> None:
    room = f"web-{secrets.token_hex(3)}"
    # A receive-only aiortc participant in the same room records what kefu forwards: the
    # server-side proof that kefu received the browser's speech.
    listener = WebRtcClient(mic=None)
    await listener.connect_ws(
        f"ws://127.0.0.1:{server.http_port}/ws", room, token=token(server.secret, room)
    )
    try:
        url = page_url(server.http, token=token(server.secret, room), room=room)
        result = await asyncio.to_thread(
            run_driver,
            tmp_path,
            [{"url": url, "wav": str(speech_wav)}],
            holdMs=8000,
            minPackets=150,
        )
        tracks = listener.heard_by_track()
    finally:
        await listener.close()
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    assert caller["error"] is None
    assert caller["connectMs"] < 5000
    inbound = audio_inbound(caller)
    assert inbound, caller["stats"]
    best = max(inbound, key=lambda s: s["packetsReceived"])
    assert best["packetsReceived"] >= 150, inbound
    assert best["totalAudioEnergy"] > 0, inbound
    assert [s for s in caller["stats"]["outbound"] if s["kind"] == "audio"][0]["packetsSent"] > 100
    # kefu received the speech: a track it forwarded correlates with the WAV Chromium played
    # (looped, so compared circularly over one period).
    sent = read_wav(speech_wav)
    scores = [looped_correlation(sent, t) for t in tracks]
    assert max(scores, default=0.0) > 0.5, scores


async def test_second_browser_hears_the_first_through_the_sfu(
    server, tmp_path: Path, speech_wav: Path, silent_wav: Path
) -> None:
    room = f"web-{secrets.token_hex(3)}"
    callers = [
        {"url": page_url(server.http, token=token(server.secret, room), room=room), "wav": str(w)}
        for w in (speech_wav, silent_wav)
    ]
    result = run_driver(
        tmp_path, callers, holdMs=8000, minPackets=100, minStreams=2, timeoutMs=8000
    )
    first, second = result["callers"]
    assert first["state"] == second["state"] == "in-call", result
    # The second caller (silent microphone) gets two audio streams with sound: kefu's bot
    # echoing the mix, and the first caller's own track forwarded by the SFU.
    sounding = [
        s
        for s in audio_inbound(second)
        if s["packetsReceived"] >= 100 and s["totalAudioEnergy"] > 0
    ]
    assert len(sounding) >= 2, audio_inbound(second)


def test_microphone_denied_shows_a_readable_error(server, tmp_path: Path) -> None:
    room = f"web-{secrets.token_hex(3)}"
    url = page_url(server.http, token=token(server.secret, room), room=room)
    result = run_driver(tmp_path, [{"url": url, "fakeUi": False}], until=["ended"])
    caller = result["callers"][0]
    assert caller["error"]["code"] == "mic_denied", caller
    assert "Microphone access was denied" in caller["errorText"]
    assert caller["state"] == "ended"


def test_bad_token_shows_a_readable_error(server, tmp_path: Path, silent_wav: Path) -> None:
    room = f"web-{secrets.token_hex(3)}"
    url = page_url(server.http, token=token("not-the-server-secret-" * 2, room), room=room)
    result = run_driver(tmp_path, [{"url": url, "wav": str(silent_wav)}], until=["ended"])
    caller = result["callers"][0]
    assert caller["error"]["code"] == "bad_token", caller
    assert "invalid or has expired" in caller["errorText"]

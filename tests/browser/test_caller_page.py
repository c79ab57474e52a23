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
    heard,
    kefu_env,
    page_url,
    require_chromium,
    run_driver,
    token,
)
from conftest import start_kefu

from loadtest.pcap import make_speech_wav, speech_like_pcm, write_wav
from loadtest.webrtc import tracked_correlation
from loadtest.webrtc_client import WebRtcClient, read_wav

pytestmark = [pytest.mark.netns, pytest.mark.peer]

SPEECH_S = 3.0


def looped_correlation(period: np.ndarray, heard: np.ndarray) -> float:
    """How well ``heard`` follows ``period`` played in a loop (Chromium loops its
    fake-microphone file), window by window; the first second (the page starting up) and
    the last 250 ms (hanging up) are left out."""
    return tracked_correlation(period, heard[48000 : len(heard) - 12000], loop=True)


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
            run_driver, tmp_path, [{"url": url, "wav": str(speech_wav)}], holdMs=8000, record=True
        )
        tracks = listener.heard_by_track()
    finally:
        await listener.close()
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    assert caller["error"] is None
    # kefu received the speech: a track it forwarded correlates with the WAV Chromium played
    # (looped, so compared window by window against the looped period).
    sent = read_wav(speech_wav)
    decoy = speech_like_pcm(SPEECH_S, 48000, seed=11)
    scores = [looped_correlation(sent, t) for t in tracks]
    # Chromium's AGC and limiter reshape the waveform: kefu's forward scores 0.44-0.66 here,
    # while the same measure gives the same track against other speech-like audio < 0.15.
    assert max(scores, default=0.0) > 0.3, scores
    forwarded = tracks[int(np.argmax(scores))]
    assert looped_correlation(decoy, forwarded) < 0.2
    # The browser played kefu's echo of that speech: a track the page played (tapped in the
    # page) follows the same WAV, and not the decoy.
    played = heard(caller)
    echo_scores = [looped_correlation(sent, t) for t in played]
    assert max(echo_scores, default=0.0) > 0.3, echo_scores
    echoed = played[int(np.argmax(echo_scores))]
    assert looped_correlation(decoy, echoed) < 0.2


async def test_second_browser_hears_the_first_through_the_sfu(
    server, tmp_path: Path, speech_wav: Path, silent_wav: Path
) -> None:
    room = f"web-{secrets.token_hex(3)}"
    callers = [
        {"url": page_url(server.http, token=token(server.secret, room), room=room), "wav": str(w)}
        for w in (speech_wav, silent_wav)
    ]
    result = run_driver(tmp_path, callers, holdMs=8000, timeoutMs=8000, record=True)
    first, second = result["callers"]
    assert first["state"] == second["state"] == "in-call", result
    # The first caller (speaking) plays kefu's echo of its speech (and the second caller's
    # silence, forwarded): one of its tracks follows the WAV.
    sent = read_wav(speech_wav)
    decoy = speech_like_pcm(SPEECH_S, 48000, seed=11)
    own = [looped_correlation(sent, t) for t in heard(first)]
    assert max(own, default=0.0) > 0.3, own
    # The second caller (silent microphone) plays two streams carrying the first caller's
    # speech: kefu's bot echoing the mix, and the first caller's own track forwarded by the
    # SFU. Each follows the WAV the first caller's fake microphone loops; none the decoy.
    played = heard(second)
    scores = [looped_correlation(sent, t) for t in played]
    assert sum(s > 0.3 for s in scores) >= 2, scores
    for track, score in zip(played, scores, strict=True):
        if score > 0.3:
            assert looped_correlation(decoy, track) < 0.2, scores


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

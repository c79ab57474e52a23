"""TURN with Debian's coturn: kefu hands out TURN REST credentials in ``joined``; clients
forced to relay-only connect through coturn and carry media both ways; wrong credentials
give a readable error instead of a silent hang.

Relay-only for aiortc is ``RTCConfiguration(iceTransportPolicy=RTCIceTransportPolicy.RELAY)``
(aiortc >= 1.10 passes it to aioice, which then gathers only TURN candidates and pairs
nothing else) -- the same knob as Chromium's ``iceTransportPolicy: "relay"``.
Run: ``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/turn -q'``.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from browser.chromium import kefu_env, page_url, require_chromium, run_driver, token
from conftest import start_kefu
from turn.coturn import coturn

from loadtest.pcap import make_speech_wav
from loadtest.webrtc import run_call

pytestmark = [pytest.mark.netns, pytest.mark.peer]

TURN_SECRET = "kefu-test-turn-secret"


@pytest.fixture
def turn(tmp_path: Path):
    with coturn(tmp_path, TURN_SECRET) as server:
        yield server


def _kefu(tmp_path: Path, turn_url: str, turn_secret: str):
    env, jwt = kefu_env(
        tmp_path, KEFU_WEBRTC_TURN_URLS=turn_url, KEFU_WEBRTC_TURN_SECRET=turn_secret
    )
    kefu = start_kefu(tmp_path, env=env)
    kefu.env = env  # type: ignore[attr-defined]
    return kefu, jwt


async def test_aiortc_relay_only_carries_media_both_ways(turn, tmp_path: Path) -> None:
    kefu, jwt = _kefu(tmp_path, turn.url, TURN_SECRET)
    try:
        room = f"turn-{secrets.token_hex(3)}"
        wav = make_speech_wav(tmp_path / "in.wav", 2.0, 16000)
        summary = await run_call(
            kefu.http, wav, tmp_path / "out.wav", seconds=3.0, room=room,
            token=token(jwt, room), relay_only=True,
        )  # fmt: skip
    finally:
        kefu.stop()
    assert summary["ok"], summary
    # RELAY policy gathers only TURN candidates, so connecting at all means through coturn;
    # the echo coming back means kefu heard us and we heard kefu.
    assert summary["echo_correlation"] > 0.5, summary


async def test_bad_turn_credentials_are_reported_not_a_hang(turn, tmp_path: Path) -> None:
    kefu, jwt = _kefu(tmp_path, turn.url, "not-the-coturn-secret")
    try:
        room = f"turn-{secrets.token_hex(3)}"
        wav = make_speech_wav(tmp_path / "in.wav", 1.0, 16000)
        summary = await run_call(
            kefu.http, wav, tmp_path / "out.wav", seconds=1.0, room=room,
            token=token(jwt, room), relay_only=True, gather_timeout_s=3.0,
        )  # fmt: skip
    finally:
        kefu.stop()
    assert not summary["ok"]
    # the gather timeout's own message is the proof it was not a hang (no wall-clock assert)
    assert "no relay candidates gathered within 3 s" in summary["error"], summary


def test_loadtest_cli_relay_only_echo(turn, tmp_path: Path) -> None:
    """``python -m loadtest webrtc --relay-only`` minting its own token like ``kefu token``."""
    kefu, _ = _kefu(tmp_path, turn.url, TURN_SECRET)
    env = {**kefu_env_of(kefu)}
    try:
        wav = make_speech_wav(tmp_path / "in.wav", 2.0, 8000)
        out = tmp_path / "out.wav"
        proc = subprocess.run(
            [sys.executable, "-m", "loadtest", "webrtc", "--target", kefu.http, "--wav",
             str(wav), "--record", str(out), "--relay-only", "--seconds", "3"],
            capture_output=True, text=True, timeout=30, env=env, check=False,
        )  # fmt: skip
    finally:
        kefu.stop()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"echo_correlation"' in proc.stdout
    assert out.stat().st_size > 48000 * 2


def kefu_env_of(kefu) -> dict[str, str]:
    import os

    return {**os.environ, **kefu.env}


def test_chromium_relay_only_connects(turn, tmp_path: Path) -> None:
    require_chromium()
    kefu, jwt = _kefu(tmp_path, turn.url, TURN_SECRET)
    try:
        room = f"turn-{secrets.token_hex(3)}"
        wav = make_speech_wav(tmp_path / "in.wav", 2.0, 48000)
        url = page_url(kefu.http, token=token(jwt, room), room=room, relay="1")
        result = run_driver(tmp_path, [{"url": url, "wav": str(wav)}], holdMs=5000, minPackets=50)
    finally:
        kefu.stop()
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    assert caller["stats"]["localCandidateType"] == "relay", caller["stats"]
    inbound = [s for s in caller["stats"]["inbound"] if s["kind"] == "audio"]
    assert inbound and inbound[0]["packetsReceived"] >= 50, inbound

"""A customer in headless Chromium asks the room's AI bot a spoken question.

Chromium's fake microphone plays a WAV (silence while the greeting plays, then a piper-spoken
question, then silence); the caller page joins a fresh room, kefu's AI bot answers it. Checked:
the browser received audio with energy (getStats) and the bot's answer reached the page over
the room's data channel with the knowledge base's key words.

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/e2e -q'``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest
from browser.chromium import audio_inbound, kefu_env, page_url, require_chromium, run_driver, token
from conftest import start_kefu

from loadtest.pcap import write_wav

pytestmark = [pytest.mark.netns, pytest.mark.peer]

QUESTION = "How long does delivery take?"
KEY_WORDS = ("business days",)


def question_wav(path: Path) -> Path:
    import soxr

    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    pcm = soxr.resample(speak(piper_voice(), QUESTION), 16000, 48000).astype(np.int16)
    silence = np.zeros(48000 * 5, np.int16)
    # Chromium loops the file: the long tail keeps the question from repeating in the call.
    write_wav(path, np.concatenate([silence, pcm, np.zeros(48000 * 14, np.int16)]), 48000)
    return path


def test_browser_customer_hears_the_bot_answer_and_sees_its_text(tmp_path: Path) -> None:
    require_chromium()
    wav = question_wav(tmp_path / "question.wav")
    env, secret = kefu_env(
        tmp_path,
        KEFU_CALLS_MEDIA_MODE="ai",
        KEFU_AI_INTERACTION_LOG=str(tmp_path / "interactions.jsonl"),
    )
    kefu = start_kefu(tmp_path, env=env)
    try:
        room = f"ai-{secrets.token_hex(3)}"
        url = page_url(kefu.http, token=token(secret, room), room=room)
        result = run_driver(
            tmp_path, [{"url": url, "wav": str(wav)}], holdMs=14000, timeoutMs=15000, timeout_s=50
        )
    finally:
        kefu.stop()
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    inbound = audio_inbound(caller)
    assert inbound and max(s.get("totalAudioEnergy", 0) for s in inbound) > 0, caller["stats"]

    bot_lines = [
        str(e.get("text", "")).lower()
        for e in caller["events"]
        if e.get("speaker") == "bot" and int(e.get("turn_id") or 0) > 0
    ]
    assert any(all(k in line for k in KEY_WORDS) for line in bot_lines), caller["events"]
    said = [
        str(e.get("text", "")).lower() for e in caller["events"] if e.get("speaker") == "caller"
    ]
    assert any("delivery" in s for s in said), said
    # The transcript panel shows the same exchange.
    panel = " ".join(caller["transcript"]).lower()
    assert all(k in panel for k in KEY_WORDS), caller["transcript"]

"""A customer in headless Chromium asks the room's AI bot a spoken question.

Chromium's fake microphone plays a WAV (silence while the greeting plays, then a piper-spoken
question, then silence); the caller page joins a fresh room, which kefu's front hands to its
room worker, and the worker's AI bot answers it. Checked:
what the page played (tapped in the page by the driver, ``record=True``) is the bot saying the
knowledge base's answer (Whisper transcript of it), and the bot's answer reached the page over
the room's data channel with the same key words, and the front showed the worker's call on
``/api/events`` and ``GET /api/calls``.

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/e2e -q'``.
"""

from __future__ import annotations

import json
import secrets
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from browser.chromium import heard, kefu_env, page_url, require_chromium, run_driver, token
from conftest import start_kefu
from helpers.events_reader import EventsReader, one_call
from helpers.speech import heard_text

from kefu.signaling.shards import shard_of
from loadtest.pcap import write_wav

pytestmark = [pytest.mark.netns, pytest.mark.peer]

QUESTION = "How long does delivery take?"
KEY_WORDS = ("business days",)
SPOKEN_WORDS = ("delivery", "business days")
"""Words of the knowledge base's answer ("Standard delivery takes 3 to 5 business days...")
that the bot's voice, as the browser played it, must carry; the greeting has none of them."""


def question_wav(path: Path) -> Path:
    import soxr

    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    pcm = soxr.resample(
        speak(piper_voice(), QUESTION, noise_scale=0, noise_w_scale=0), 16000, 48000
    ).astype(np.int16)
    silence = np.zeros(48000 * 5, np.int16)
    # Chromium loops the file: the long tail keeps the question from repeating in the call.
    write_wav(path, np.concatenate([silence, pcm, np.zeros(48000 * 14, np.int16)]), 48000)
    return path


def transcript(tracks: list[np.ndarray]) -> list[str]:
    """Whisper's (the e2e tests' model) transcript of each played track, utterance by
    utterance, lower case, words only."""
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

    asr = WhisperAsr()
    assert asr.ready, asr.error
    return [heard_text(asr, pcm, 48000) for pcm in tracks]


def worker_room() -> str:
    """A fresh room id that the front hands to its room worker (shard 1 of 2)."""
    while True:
        room = f"ai-{secrets.token_hex(3)}"
        if shard_of(room, 2) == 1:
            return room


def calls_once(http: str, reader: EventsReader) -> list[dict[str, object]]:
    """``GET /api/calls`` as the supervisor, once the call has started."""
    reader.wait_for("call.started", 90)
    request = urllib.request.Request(
        f"{http}/api/calls", headers={"Authorization": f"Bearer {reader.token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return list(json.loads(response.read())["calls"])


# Generous: on a loaded 2-core box kefu's models (and then Whisper's) take minutes to load.
@pytest.mark.timeout(360)
def test_browser_customer_hears_the_bot_answer_and_sees_its_text(tmp_path: Path) -> None:
    require_chromium()
    wav = question_wav(tmp_path / "question.wav")
    env, secret = kefu_env(
        tmp_path,
        KEFU_CALLS_MEDIA_MODE="ai",
        KEFU_AI_INTERACTION_LOG=str(tmp_path / "interactions.jsonl"),
        # One room worker besides the front (a 2-core box's default): the room is the
        # worker's, and the front still shows its call to supervisors and the workbench.
        KEFU_WEBRTC_ROOM_WORKERS="2",
    )
    kefu = start_kefu(tmp_path, env=env)
    listed: list[dict[str, object]] = []
    try:
        room = worker_room()
        url = page_url(kefu.http, token=token(secret, room), room=room)
        with EventsReader(kefu.http, secret) as reader:  # a supervisor watching every call
            lister = threading.Thread(target=lambda: listed.extend(calls_once(kefu.http, reader)))
            lister.start()
            result = run_driver(
                tmp_path,
                [{"url": url, "wav": str(wav)}],
                holdMs=14000,
                timeoutMs=15000,
                timeout_s=90,
                record=True,
            )
            lister.join(30)
    finally:
        kefu.stop()
    # GET /api/calls on the front listed the call its worker hosted.
    assert [(c["call_id"], c["channel"]) for c in listed] == [(f"room:{room}", "webrtc")], listed
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    # The browser played the bot speaking the answer: Whisper hears its words in the audio.
    said_back = transcript(heard(caller))
    assert any(all(w in text for w in SPOKEN_WORDS) for text in said_back), said_back

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

    # The same conversation on /api/events, as the call room:<room>.
    mine = one_call(reader.events, f"room:{room}")
    kinds = [e["type"] for e in mine]
    assert kinds and kinds[0] == "call.started" and mine[0]["kind"] == "webrtc", kinds
    lines = [e for e in mine if e["type"] == "transcript.final"]
    asked = [e for e in lines if e["speaker"] == "caller" and "deliver" in e["text"].lower()]
    assert asked, lines
    turn = asked[0]["turn_id"]
    told = [e for e in lines if e["speaker"] == "bot" and e["turn_id"] == turn]
    assert told and all(k in told[0]["text"].lower() for k in KEY_WORDS), lines
    traces = [e for e in mine if e["type"] == "turn.trace" and e["turn_id"] == turn]
    assert traces and traces[0]["stages_ms"]["response"] is not None, kinds
    assert mine.index(asked[0]) < mine.index(told[0]) < mine.index(traces[0]), kinds


# -- a Mandarin web caller -------------------------------------------------------------------

QUESTION_ZH = "我退货好几天了，钱什么时候能退回来啊？"


def question_wav_zh(path: Path) -> Path:
    import soxr

    from loadtest.mandarin_voice import speak_zh

    pcm = soxr.resample(speak_zh(QUESTION_ZH), 16000, 48000).astype(np.int16)
    silence = np.zeros(48000 * 5, np.int16)
    write_wav(path, np.concatenate([silence, pcm, np.zeros(48000 * 16, np.int16)]), 48000)
    return path


@pytest.mark.timeout(420)
def test_a_mandarin_web_caller_is_answered_in_mandarin(tmp_path: Path) -> None:
    """A room whose id says Mandarin (``ai.language_by_room``): the caller asks in Mandarin
    (a voice that is not kefu's), the page plays the Chinese knowledge-base answer."""
    require_chromium()
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

    wav = question_wav_zh(tmp_path / "question-zh.wav")
    env, secret = kefu_env(
        tmp_path,
        KEFU_CALLS_MEDIA_MODE="ai",
        KEFU_AI_LANGUAGE="en",
        KEFU_AI_LANGUAGE_BY_ROOM="cn-:zh",
        KEFU_WEBRTC_ROOM_WORKERS="1",
    )
    kefu = start_kefu(tmp_path, env=env)
    try:
        room = f"cn-{secrets.token_hex(3)}"
        url = page_url(kefu.http, token=token(secret, room), room=room)
        result = run_driver(
            tmp_path,
            [{"url": url, "wav": str(wav)}],
            holdMs=18000,
            timeoutMs=15000,
            timeout_s=120,
            record=True,
        )
    finally:
        kefu.stop()
    caller = result["callers"][0]
    assert caller["state"] == "in-call", caller
    bot_lines = [
        str(e.get("text", ""))
        for e in caller["events"]
        if e.get("speaker") == "bot" and int(e.get("turn_id") or 0) > 0
    ]
    assert any("工作日" in line for line in bot_lines), caller["events"]
    said = [str(e.get("text", "")) for e in caller["events"] if e.get("speaker") == "caller"]
    assert any("退" in s for s in said), said
    asr = MultilingualWhisperAsr()
    played = [heard_text(asr, pcm, 48000) for pcm in heard(caller)]
    assert any("工作日" in text or "退款" in text for text in played), played

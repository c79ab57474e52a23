"""Clause splitting, normalisation, SSML parsing and the emotion mapping (no models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kefu.ai_bridge.speak.base import EMOTIONS, TtsError
from kefu.ai_bridge.speak.emotion import espeak_style, piper_style
from kefu.ai_bridge.speak.text import (
    Segment,
    SsmlError,
    has_cjk,
    normalize_text,
    parse_ssml,
    plan_clauses,
    say_as,
    split_clauses,
)

GOLDEN = Path(__file__).parent / "golden"


def _cases(name: str) -> list[dict[str, object]]:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", _cases("clauses.json"), ids=lambda c: str(c["text"])[:24])
def test_clause_golden(case: dict[str, object]) -> None:
    assert split_clauses(normalize_text(str(case["text"]))) == case["clauses"]


@pytest.mark.parametrize("case", _cases("ssml.json"), ids=lambda c: str(c["ssml"])[7:31])
def test_ssml_golden(case: dict[str, object]) -> None:
    got = parse_ssml(str(case["ssml"]))
    expected = [Segment(**s) for s in case["segments"]]  # type: ignore[arg-type]
    assert [s.text for s in got] == [s.text for s in expected]
    for g, e in zip(got, expected, strict=True):
        assert (g.emotion, g.pause_ms) == (e.emotion, e.pause_ms)
        assert g.rate == pytest.approx(e.rate)
        assert g.pitch == pytest.approx(e.pitch)
        assert g.volume == pytest.approx(e.volume)


@pytest.mark.parametrize(
    "text",
    [
        "The total is 3.5 dollars and 1,000.25 cents",
        "Order A-123.45/B is late",
        "版本3.5.1已经发布",
        "Your id is 12.34.56 today",
    ],
)
def test_never_splits_inside_numbers_or_ids(text: str) -> None:
    joined = " ".join(split_clauses(text, first_max_words=2, first_max_chars=3))
    for token in ("3.5", "1,000.25", "A-123.45/B", "3.5.1", "12.34.56"):
        if token in text:
            assert token in joined
    for clause in split_clauses(text, first_max_words=2, first_max_chars=3):
        assert not clause.startswith((".", ",", "5", "4"))


def test_first_clause_is_short_later_ones_are_not() -> None:
    text = (
        "I have checked your account and I can see that the payment went through on "
        "Monday morning and the parcel was handed to the courier in the afternoon"
    )
    clauses = split_clauses(text)
    assert len(clauses[0].split()) <= 6
    assert all(len(c.split()) <= 22 for c in clauses)
    assert " ".join(clauses) == text


def test_chinese_first_clause_is_cut_between_characters() -> None:
    text = "我们的退货政策是在收到商品之后七天之内可以无理由退货并且运费由我们承担"
    clauses = split_clauses(text)
    assert "".join(clauses) == text
    assert len(clauses[0]) <= 14 + 2  # a preferred cut may run two characters over


def test_abbreviations_do_not_end_a_clause() -> None:
    assert split_clauses("Dr. Wang and Mrs. Lee will call you. Thanks.") == [
        "Dr. Wang and Mrs. Lee will call you.",
        "Thanks.",
    ]


def test_normalize() -> None:
    assert normalize_text("  Hello\n\n  **world**  ") == "Hello world"
    assert normalize_text("订单１２３号") == "订单123号"
    assert normalize_text("满意度９８％。") == "满意度百分之98。"
    assert normalize_text("您好 ， 欢迎 光临") == "您好，欢迎光临"


def test_say_as() -> None:
    assert say_as("2024", "digits", zh=False) == "2 0 2 4"
    assert say_as("110", "telephone", zh=True) == "幺幺零"
    assert say_as("110", "digits", zh=True) == "一一零"
    assert say_as("abc", "characters", zh=False) == "a b c"


def test_has_cjk() -> None:
    assert has_cjk("hello 您好")
    assert not has_cjk("hello, ça va?")


@pytest.mark.parametrize(
    "doc, message",
    [
        ("<speak><prosody rate='slow'>hi</speak>", "closing </speak>"),
        ("<speak><kefu:emotion name='bored'>hi</kefu:emotion></speak>", "unknown emotion"),
        ("<speak>hi<break time='soon'/></speak>", "break time"),
        ("<speak><prosody rate='zippy'>hi</prosody></speak>", "prosody rate"),
        ("<speak><emphasis>hi", "never closed"),
    ],
)
def test_ssml_errors(doc: str, message: str) -> None:
    with pytest.raises(SsmlError, match=message):
        parse_ssml(doc)


def test_plain_text_is_one_segment_with_the_callers_style() -> None:
    assert parse_ssml("Hi <3 you", emotion="happy", rate=1.2) == [
        Segment("Hi <3 you", "happy", 1.2)
    ]


def test_plan_keeps_pause_on_last_clause() -> None:
    plan = plan_clauses('<speak>Hello there, nice day.<break time="250ms"/>Bye.</speak>')
    assert [(s.text, s.pause_ms) for s in plan] == [
        ("Hello there,", 0.0),
        ("nice day.", 250.0),
        ("Bye.", 0.0),
    ]


def test_emotion_mapping_is_distinct_and_scaled() -> None:
    assert len({piper_style(e) for e in EMOTIONS}) == 6
    assert len({espeak_style(e) for e in EMOTIONS}) == 6
    assert piper_style("sad").length_scale > piper_style("happy").length_scale
    assert piper_style("sad").pitch < piper_style("happy").pitch
    assert espeak_style("sad").rate < espeak_style("happy").rate
    assert piper_style("neutral", rate=2.0).length_scale == pytest.approx(0.5)
    assert espeak_style("neutral", rate=10.0).rate == 450  # clamped to espeak's maximum
    with pytest.raises(TtsError):
        piper_style("bored")

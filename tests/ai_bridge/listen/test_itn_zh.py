"""Chinese inverse text normalisation of ASR transcripts: golden conversions and robustness."""

from __future__ import annotations

from pathlib import Path

import cn2an
import pytest
from helpers.golden import read_pairs
from hypothesis import given, settings
from hypothesis import strategies as st

from kefu.ai_bridge.listen.itn_zh import inverse_normalize_zh
from kefu.ai_bridge.listen.itn_zh_rules import money_text, parse_cardinal, parse_digits

GOLDEN = Path(__file__).parent / "golden" / "itn_zh.tsv"


GOLDEN_ROWS = read_pairs(GOLDEN)


def test_golden_file_is_large_enough() -> None:
    assert len(GOLDEN_ROWS) >= 60
    assert sum(source == expected for source, expected in GOLDEN_ROWS) >= 25  # idioms kept


@pytest.mark.parametrize(("source", "expected"), GOLDEN_ROWS, ids=[r[0] for r in GOLDEN_ROWS])
def test_golden(source: str, expected: str) -> None:
    assert inverse_normalize_zh(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("幺三八零零幺三八零零零", "13800138000"),
        ("一百二十块五", "120.5元"),
        ("两百", "200"),
        ("百分之五十", "50%"),
        ("三月五号", "3月5号"),
        ("下午三点半", "下午3点30分"),
        ("订单号是一二三四五", "订单号是12345"),
        ("我的iPhone 十五", "我的iPhone 15"),
    ],
)
def test_examples_from_the_issue(source: str, expected: str) -> None:
    assert inverse_normalize_zh(source) == expected


@pytest.mark.parametrize(
    "word",
    [
        *("一下", "一些", "一点", "一样", "一直", "一起", "统一", "一心一意", "万一", "十分"),
        *("三心二意", "第一次", "星期一", "周一", "千万", "一会儿", "一块儿", "之一", "唯一"),
    ],
)
def test_words_containing_numerals_are_kept(word: str) -> None:
    sentence = f"我{word}觉得"
    assert inverse_normalize_zh(sentence) == sentence


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        42,
        b"\xe4\xb8\x80",
        "一" * 10_000,
        "幺三八" * 3000,
        "点点点点",
        "百分之",
        "负",
        "块块块元元",
        "零零零点零零",
        "一百二十三四五六七八九十百千万亿",
        "亿亿亿万万万千千千",
        "九" * 40 + "亿",
        "\ue000\ue001一百\uf8ff",
        "，。！？、一；：（十）",
        "mixed English 一百 words 两千 and digits 123",
    ],
)
def test_bad_input_does_not_raise(garbage: object) -> None:
    out = inverse_normalize_zh(garbage)  # type: ignore[arg-type]
    assert isinstance(out, str)


def test_none_gives_empty_string() -> None:
    assert inverse_normalize_zh(None) == ""  # type: ignore[arg-type]


def test_private_use_characters_in_the_input_survive() -> None:
    text = "\ue000一下\ue001两百\uf8ff"
    assert inverse_normalize_zh(text) == "\ue000一下\ue001200\uf8ff"


def test_long_transcripts_are_processed_in_pieces() -> None:
    sentence = "我想问一下，订单号是一二三四五，一共两百块。"
    out = inverse_normalize_zh(sentence * 400)
    assert out == "我想问一下，订单号是12345，一共200元。" * 400


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet="零〇一二两三四五六七八九幺十百千万亿点块元毛角分钟之百负第下午半刻个号月",
        max_size=40,
    )
)
def test_numeral_soup_does_not_raise(text: str) -> None:
    assert isinstance(inverse_normalize_zh(text), str)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_text_does_not_raise(text: str) -> None:
    out = inverse_normalize_zh(text)
    assert isinstance(out, str)
    if not any(c in "零〇一二两三四五六七八九幺十百千万亿" for c in text):
        assert out == text


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**12 - 1))
def test_parse_cardinal_agrees_with_cn2an(n: int) -> None:
    assert parse_cardinal(cn2an.an2cn(str(n))) == n


def test_parser() -> None:
    assert parse_cardinal("一百二") == 120
    assert parse_cardinal("三万五") == 35000
    assert parse_cardinal("两千三") == 2300
    assert parse_cardinal("一亿两千万") == 120_000_000
    assert parse_cardinal("十万零二十") == 100_020
    assert parse_cardinal("一千零五") == 1005
    assert parse_cardinal("十") == 10
    for not_a_number in ("千万", "万一", "三四百", "百", "一百一千", "幺百", "二十二十"):
        assert parse_cardinal(not_a_number) is None, not_a_number
    assert parse_digits("幺三八〇") == "1380"
    assert parse_digits("一百") is None
    assert money_text(120, 5, 0) == "120.5元"
    assert money_text(3, 5, 2) == "3.52元"
    assert money_text(2, 0, 0) == "2元"

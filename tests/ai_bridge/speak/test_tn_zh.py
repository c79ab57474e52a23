"""Chinese text normalisation for TTS: golden readings, robustness, round trips through ITN."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import cn2an
import pytest
from helpers.golden import read_pairs
from hypothesis import given, settings
from hypothesis import strategies as st

from kefu.ai_bridge.listen.itn_zh import inverse_normalize_zh
from kefu.ai_bridge.speak.tn_zh import normalize_zh
from kefu.ai_bridge.speak.tn_zh_rules import cardinal_zh, digits_zh, int_zh, money_zh

GOLDEN = Path(__file__).parent / "golden" / "tn_zh.tsv"


GOLDEN_ROWS = read_pairs(GOLDEN)


def test_golden_file_is_large_enough() -> None:
    assert len(GOLDEN_ROWS) >= 60


@pytest.mark.parametrize(("source", "expected"), GOLDEN_ROWS, ids=[r[0] for r in GOLDEN_ROWS])
def test_golden(source: str, expected: str) -> None:
    assert normalize_zh(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("13800138000", "幺三八零零幺三八零零零"),
        ("128.50元", "一百二十八元五角"),
        ("¥12.50", "十二元五角"),
        ("12元5角", "十二元五角"),
        ("2024-03-05", "二零二四年三月五日"),
        ("14:30", "十四点三十分"),
        ("9:05", "九点零五分"),
        ("35%", "百分之三十五"),
        ("12.5%", "百分之十二点五"),
        ("3-5天", "三到五天"),
        ("第3", "第三"),
        ("2个", "两个"),
        ("2点", "两点"),
    ],
)
def test_examples_from_the_issue(source: str, expected: str) -> None:
    assert normalize_zh(source) == expected


@pytest.mark.parametrize(
    "text",
    ["", "你好", "一下子就好了", "Hello, world!", "【公告】请稍候……", "iPhone Pro", "%", "¥", "℃"],
)
def test_text_without_digits_is_untouched(text: str) -> None:
    assert normalize_zh(text) is text


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        12345,
        3.5,
        b"123",
        "9" * 10_000,
        "１２３４５６７８９０" * 50,
        "1.2.3.4.5.6.7.8.9.10...",
        "--1--2--3",
        "¥¥¥12..5元元",
        "12:99:99:99",
        "::1::",
        "%%%50%%%",
        "第",
        "2024-13-45",
        "0/0/0000",
        "\x00\ufffd\ue000123",
        "١٢٣ ٣٤ ۵",
        "+86",
        "≥≤<>±",
    ],
)
def test_bad_input_does_not_raise(garbage: object) -> None:
    out = normalize_zh(garbage)  # type: ignore[arg-type]
    assert isinstance(out, str)


def test_none_gives_empty_string() -> None:
    assert normalize_zh(None) == ""  # type: ignore[arg-type]


def test_very_long_digit_string_is_read_digit_by_digit() -> None:
    out = normalize_zh("1" * 5000)
    assert out == "幺" * 5000


def test_fullwidth_digits_are_read() -> None:
    assert normalize_zh("订单金额１２８．５０元") == "订单金额一百二十八元五角"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_normalised_without_error(text: str) -> None:
    out = normalize_zh(text)
    assert isinstance(out, str)
    if not any("0" <= c <= "9" or "０" <= c <= "９" for c in text):
        assert out == text


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**12 - 1))
def test_int_zh_agrees_with_cn2an(n: int) -> None:
    # cn2an is the oracle; our only difference is the spoken 两 before 千/万/亿 at the start.
    assert int_zh(n, liang=False) == cn2an.an2cn(str(n))
    spoken = int_zh(n)
    assert spoken == int_zh(n, liang=False) or spoken.startswith("两")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=11, max_value=10**12 - 1))
def test_round_trip_plain_cardinals(n: int) -> None:
    text = f"这批货共{n}件"
    assert inverse_normalize_zh(normalize_zh(text)) == text


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999))
def test_round_trip_decimals_and_percentages(whole: int, frac: int) -> None:
    number = f"{whole}.{frac:03d}"
    assert inverse_normalize_zh(normalize_zh(f"比例是{number}倍")) == f"比例是{number}倍"
    assert inverse_normalize_zh(normalize_zh(f"增长{whole}%")) == f"增长{whole}%"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**8), st.integers(min_value=0, max_value=99))
def test_round_trip_money(yuan: int, cents: int) -> None:
    text = f"金额{yuan}.{cents:02d}元"
    expected = Decimal(f"{yuan}.{cents:02d}").normalize()
    out = inverse_normalize_zh(normalize_zh(text))
    assert out == f"金额{expected:f}元"


def test_readers() -> None:
    assert int_zh(0) == "零"
    assert int_zh(10) == "十"
    assert int_zh(110) == "一百一十"
    assert int_zh(100020) == "十万零二十"
    assert int_zh(2000) == "两千"
    assert int_zh(22000) == "两万二千"
    assert int_zh(200) == "二百"
    assert int_zh(10**12) == "一零零零零零零零零零零零零"
    assert cardinal_zh("-1,234.05") == "负一千二百三十四点零五"
    assert digits_zh("110", yao=True) == "幺幺零"
    assert money_zh("0.5") == "五角"
    assert money_zh("0") == "零元"
    assert money_zh("0.125") == "零点一二五元"
    assert money_zh("2.22") == "两元两角两分"

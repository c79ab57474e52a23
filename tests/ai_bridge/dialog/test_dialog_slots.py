"""Slot extraction and normalisation."""

from __future__ import annotations

import datetime as dt

import pytest

from kefu.ai_bridge.dialog.slots import display, extract_slots

TODAY = dt.date(2026, 12, 2)  # a Wednesday


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my order is #A12345", {"order_number": "A12345"}),
        ("order number 1234 5678", {"order_number": "12345678"}),
        ("订单号A12345还没到", {"order_number": "A12345"}),
        ("订单号是 88812345", {"order_number": "88812345"}),
        ("call me on 138 1234 5678", {"phone": "+8613812345678"}),
        ("我的手机是+86 13912345678", {"phone": "+8613912345678"}),
        ("my number is (415) 555-0123", {"phone": "+14155550123"}),
        ("it's 415.555.0123", {"phone": "+14155550123"}),
        ("I was charged $12.50", {"amount": "12.50 USD"}),
        ("they took $1,200", {"amount": "1200.00 USD"}),
        ("12 dollars and 5 cents", {"amount": "12.05 USD"}),
        ("多扣了12元", {"amount": "12.00 CNY"}),
        ("¥8.5", {"amount": "8.50 CNY"}),
        ("deliver it tomorrow", {"date": "2026-12-03"}),
        ("today", {"date": "2026-12-02"}),
        ("next Monday please", {"date": "2026-12-07"}),
        ("on Friday", {"date": "2026-12-04"}),
        ("Dec 3rd", {"date": "2026-12-03"}),
        ("the 5th of January", {"date": "2027-01-05"}),
        ("2026-12-24", {"date": "2026-12-24"}),
        ("12/03/2026", {"date": "2026-12-03"}),
        ("12月3日送到", {"date": "2026-12-03"}),
        ("后天", {"date": "2026-12-04"}),
        ("下周一", {"date": "2026-12-07"}),
        ("星期五", {"date": "2026-12-04"}),
        ("where is order #A12345, I paid $20", {"order_number": "A12345", "amount": "20.00 USD"}),
        ("nothing to see here", {}),
    ],
)
def test_extract(text: str, expected: dict[str, str]) -> None:
    assert extract_slots(text, today=TODAY) == expected


def test_bare_code_counts_only_when_asked_for() -> None:
    assert extract_slots("it's A12345", today=TODAY) == {}
    assert extract_slots("it's A12345", today=TODAY, expect="order_number") == {
        "order_number": "A12345"
    }
    assert extract_slots("a 1 2 3 4 5", today=TODAY, expect="order_number") == {
        "order_number": "A12345"
    }


def test_impossible_dates_are_ignored() -> None:
    assert extract_slots("2026-02-30", today=TODAY) == {}


def test_display() -> None:
    assert display({"order_number": "A1"}, "order_number", "en") == "order A1"
    assert display({"order_number": "A1"}, "order_number", "zh") == "订单A1"
    assert display({}, "order_number", "en") is None

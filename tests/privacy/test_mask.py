"""Masking personal data in transcripts: what a caller says about themselves is replaced,
what the conversation needs to stay readable (order numbers, dates, amounts) is kept."""

from __future__ import annotations

import pytest

from kefu.privacy.mask import mask_record, mask_text


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("you can reach me at 13912345678 after six", "you can reach me at [phone] after six"),
        ("my number is +86 139 1234 5678", "my number is [phone]"),
        ("我的电话是 139-1234-5678，谢谢", "我的电话是 [phone]，谢谢"),
        ("call the office on 021-61234567", "call the office on [phone]"),
        ("it's (415) 555-0132 or 415.555.0132", "it's [phone] or [phone]"),
        ("from London, +44 20 7946 0958", "from London, [phone]"),
        ("the card is 5500 0055 5555 5559", "the card is [card]"),
        ("card number 4012888888881881 expiry 09/27", "card number [card] expiry 09/27"),
        ("身份证 31011519920721094X 办理", "身份证 [id] 办理"),
        ("ID 440301198511110123.", "ID [id]."),
        # One digit misheard: no longer a valid ID, still masked as a long number.
        ("ID 440301198511110124", "ID [number]"),
        ("write to li.wei+orders@mail.example.cn please", "write to [email] please"),
        ("account 6222 0212 3456 7890 123", "account [number]"),
    ],
)
def test_personal_numbers_and_addresses_are_masked(said: str, kept: str) -> None:
    assert mask_text(said) == kept


@pytest.mark.parametrize(
    "said",
    [
        "where is order 55213",
        "order number 20261204 was late",
        "standard delivery takes 3 to 5 business days",
        "I paid 1299.00 yuan on 2026-12-04 at 14:30",
        "my postcode is 200120",
        "the code was 4471, ticket 88",
    ],
)
def test_what_the_conversation_needs_is_kept(said: str) -> None:
    assert mask_text(said) == said


def test_records_are_masked_except_kefus_own_identifiers() -> None:
    record = {
        "type": "note",
        "call_id": "13912345678",  # kefu's id, whatever it looks like
        "by": "maria",
        "text": "called back on 13912345678",
        "turns": [{"transcript": "mail me at a@b.cn", "intent": "contact"}],
        "at": 1767225600.5,
    }
    masked = mask_record(record)
    assert masked == {
        "type": "note",
        "call_id": "13912345678",
        "by": "maria",
        "text": "called back on [phone]",
        "turns": [{"transcript": "mail me at [email]", "intent": "contact"}],
        "at": 1767225600.5,
    }
    assert record["text"] == "called back on 13912345678"  # the original is not changed

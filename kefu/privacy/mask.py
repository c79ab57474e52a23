"""Masking personal data in text kept at rest (the interaction log's transcripts and notes).

What is replaced, in this order (longer patterns first, so a card number is not taken for a
phone number):

* e-mail addresses -> ``[email]``;
* PRC resident identity numbers (18 characters, the last a digit or X, GB 11643 check digit
  valid) -> ``[id]``;
* payment card numbers (13 to 19 digits, spaces or hyphens allowed between groups, Luhn
  valid) -> ``[card]``; other runs of 13 to 19 digits (a card or account number the ASR got
  one digit wrong, a bank account) -> ``[number]``;
* phone numbers -> ``[phone]``: Chinese mobiles (``1[3-9]`` and 9 more digits, optionally
  ``+86``), Chinese landlines with their area code (``010-12345678``), North American numbers
  (``(555) 123-4567``, ``555.123.4567``) and international ones written with ``+``.

Digits only count when they are not part of a longer run of digits, so order numbers, dates
and amounts stay readable ("order 55213", "3 to 5 business days"). Numbers spoken as words
("five five five ...") or as Chinese numerals are not recognised: the ASR's inverse text
normalisation writes most of them as digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MASK_KEEP", "mask_record", "mask_text"]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_ID = re.compile(r"(?<![0-9A-Za-z])\d{17}[\dXx](?![0-9A-Za-z])")
_CARD = re.compile(r"(?<![\d+-])\d(?:[ -]?\d){12,18}(?![\d-])")
_PHONE = re.compile(
    r"(?<![\d+])(?:"
    r"(?:\+?86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}"  # Chinese mobile
    r"|0\d{2,3}[ -]\d{7,8}"  # Chinese landline with area code
    r"|\+\d{1,3}(?:[ -]?\(?\d{1,4}\)?)(?:[ -]?\d{2,4}){2,4}"  # international, with +
    r"|\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}"  # North American
    r")(?!\d)"
)
_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"

MASK_KEEP = frozenset({"call_id", "type", "intent", "source", "lang", "by", "speaker", "v"})
"""Record keys whose values are identifiers kefu made, never masked."""


def _id_valid(text: str) -> bool:
    total = sum(int(d) * w for d, w in zip(text[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == text[17].upper()


def _luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _replace(
    pattern: re.Pattern[str], label: str, valid: Callable[[str], bool] | None, other: str = ""
) -> Callable[[str], str]:
    """Replace matches of ``pattern`` with ``label`` where ``valid`` (None: always) says so,
    else with ``other`` ("": leave them)."""

    def sub(match: re.Match[str]) -> str:
        digits = re.sub(r"[^0-9Xx]", "", match.group())
        if valid is None or valid(digits):
            return label
        return other or match.group()

    return lambda text: pattern.sub(sub, text)


_STEPS = (
    _replace(_EMAIL, "[email]", None),
    _replace(_ID, "[id]", _id_valid),
    _replace(_CARD, "[card]", _luhn_valid, "[number]"),
    _replace(_PHONE, "[phone]", None),
)


def mask_text(text: str) -> str:
    """``text`` with e-mail addresses, ID, card and phone numbers replaced (see module doc)."""
    if not any(ch.isdigit() or ch == "@" for ch in text):
        return text
    for step in _STEPS:
        text = step(text)
    return text


def mask_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a log record with every string masked, except kefu's own identifiers
    (:data:`MASK_KEEP`); nested lists and objects too."""
    return {k: v if k in MASK_KEEP else _mask_value(v) for k, v in record.items()}


def _mask_value(value: Any) -> Any:
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return mask_record(value)
    if isinstance(value, list | tuple):
        return [_mask_value(v) for v in value]
    return value

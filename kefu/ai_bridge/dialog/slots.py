"""Slot extraction: order numbers, phone numbers, amounts and dates, normalised.

Normal forms (what ``extract_slots`` returns):

* ``order_number``: upper-case letters+digits without '#' or spaces, e.g. ``A12345``
* ``phone``: E.164, e.g. ``+8613812345678`` (CN mobile) or ``+14155550123`` (US)
* ``amount``: ``"<decimal with 2 places> <ISO 4217>"``, e.g. ``12.50 USD``, ``12.00 CNY``
* ``date``: ISO 8601 ``YYYY-MM-DD``, relative words resolved against ``today``

Transcripts come from ASR, so numbers may contain spaces or dashes ("138 1234 5678").
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass

SLOT_NAMES = ("order_number", "phone", "amount", "date")

_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = "一二三四五六日"
_MONTHS_EN = {
    m[:3]: n
    for n, m in enumerate(
        (
            "january february march april may june july august september october november december"
        ).split(),
        start=1,
    )
}

# "#A12345", "order A12345", "order number 123456", "订单号A12345", "订单12345678".
_ORDER = re.compile(
    r"(?:#\s?([A-Za-z]{0,3}\d{4,12})\b)"
    r"|(?:\border(?:\s+(?:number|no\.?|id|#))?\s*(?:is\s+)?#?\s?"
    r"([A-Za-z]{0,3}\s?\d[\d ]{3,14}\d)\b)"
    r"|(?:订单(?:号|编号)?(?:是|为)?[:：]?\s*#?([A-Za-z]{0,3}\d{4,12}))",
    re.I,
)
# Any code when the bot just asked for the order number ("it's A12345", "a 1 2 3 4 5").
_BARE_ORDER = re.compile(r"(?<![A-Za-z0-9])#?\s?([A-Za-z]{0,3}\s?\d(?:\s?\d){3,11})(?![A-Za-z0-9])")
_CN_MOBILE = re.compile(r"(?<!\d)(?:\+?86[\s-]?)?(1[3-9]\d(?:[\s-]?\d){8})(?!\d)")
_US_PHONE = re.compile(
    r"(?<!\d)(?:\+?1[\s.-]?)?\(?([2-9]\d{2})\)?[\s.-]?([2-9]\d{2})[\s.-]?(\d{4})(?!\d)"
)
_AMOUNT_USD = re.compile(
    r"\$\s?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?"
    r"|(\d+)(?:\.(\d{1,2}))?\s?(?:dollars?|usd|bucks)\b(?:\s(?:and\s)?(\d{1,2})\s?cents?)?",
    re.I,
)
_AMOUNT_CNY = re.compile(
    r"(?:¥|￥)\s?(\d+)(?:\.(\d{1,2}))?|(\d+)(?:\.(\d{1,2}))?\s?(?:元|块|rmb|人民币)", re.I
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_US_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_ZH_DATE = re.compile(r"(?:(\d{4})年)?(\d{1,2})月(\d{1,2})[日号]")
_EN_MONTH_DATE = re.compile(
    r"\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?"
    r"(?:,?\s+(\d{4}))?\b"
    r"|\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)"
    r"[a-z]*\b(?:,?\s+(\d{4}))?",
    re.I,
)
_EN_WEEKDAY = re.compile(r"\b(next\s+|this\s+|on\s+)?(" + "|".join(_WEEKDAYS_EN) + r")\b", re.I)
_ZH_WEEKDAY = re.compile(r"(下下|下个?|这个?|本)?(?:周|星期|礼拜)([一二三四五六日天])")


@dataclass(frozen=True, slots=True)
class Slot:
    """One extracted slot value."""

    name: str
    """One of SLOT_NAMES."""
    value: str
    """Normalised value (see module docstring)."""
    raw: str
    """The text it was extracted from."""


def _safe_date(y: int, m: int, d: int) -> dt.date | None:
    try:
        return dt.date(y, m, d)
    except ValueError:
        return None


def _future_year(today: dt.date, m: int, d: int) -> dt.date | None:
    # "December 3" said in January means this year; said after it passed, next year.
    cand = _safe_date(today.year, m, d)
    if cand is not None and cand < today - dt.timedelta(days=31):
        cand = _safe_date(today.year + 1, m, d)
    return cand


def _weekday(today: dt.date, target: int, modifier: str) -> dt.date:
    ahead = (target - today.weekday()) % 7
    if modifier in ("next",):
        # "next Monday" said on a Wednesday is the Monday of next week (5 days on), said on a
        # Sunday it is tomorrow: the first one strictly after today, never today itself.
        ahead = ahead or 7
    elif modifier in ("下", "下个"):
        # 下周一 is always in the next calendar week (weeks start on Monday in China).
        monday_next = today + dt.timedelta(days=7 - today.weekday())
        return monday_next + dt.timedelta(days=target)
    elif modifier == "下下":
        monday_next = today + dt.timedelta(days=14 - today.weekday())
        return monday_next + dt.timedelta(days=target)
    elif modifier in ("这", "这个", "本"):
        return today + dt.timedelta(days=target - today.weekday())
    return today + dt.timedelta(days=ahead)


def _date(text: str, today: dt.date) -> tuple[dt.date, str] | None:
    low = text.lower()
    if m := _ISO_DATE.search(text):
        d = _safe_date(int(m[1]), int(m[2]), int(m[3]))
        if d:
            return d, m[0]
    if m := _US_DATE.search(text):
        d = _safe_date(int(m[3]), int(m[1]), int(m[2]))
        if d:
            return d, m[0]
    if m := _ZH_DATE.search(text):
        d = (
            _safe_date(int(m[1]), int(m[2]), int(m[3]))
            if m[1]
            else _future_year(today, int(m[2]), int(m[3]))
        )
        if d:
            return d, m[0]
    if m := _EN_MONTH_DATE.search(text):
        mon, day, year = (m[1], m[2], m[3]) if m[1] else (m[5], m[4], m[6])
        mn = _MONTHS_EN[mon.lower()[:3]]
        d = _safe_date(int(year), mn, int(day)) if year else _future_year(today, mn, int(day))
        if d:
            return d, m[0]
    for words, offset in (
        (("day after tomorrow", "后天"), 2),
        (("tomorrow", "明天", "明日"), 1),
        (("today", "tonight", "今天", "今日", "今晚"), 0),
        (("yesterday", "昨天"), -1),
    ):
        for w in words:
            if w in low:
                return today + dt.timedelta(days=offset), w
    if m := _EN_WEEKDAY.search(text):
        mod = (m[1] or "").strip().lower()
        return _weekday(today, _WEEKDAYS_EN.index(m[2].lower()), mod), m[0]
    if m := _ZH_WEEKDAY.search(text):
        idx = 6 if m[2] in "日天" else _WEEKDAYS_ZH.index(m[2])
        return _weekday(today, idx, m[1] or ""), m[0]
    return None


def _money(whole: str, frac: str | None, currency: str) -> str:
    cents = (frac or "0").ljust(2, "0")
    return f"{int(whole.replace(',', ''))}.{cents} {currency}"


def extract(text: str, *, today: dt.date | None = None, expect: str | None = None) -> list[Slot]:
    """All slots found in ``text``. ``expect`` names a slot the bot just asked for, which
    lets a bare code ("A12345") count as an order number."""
    today = today or dt.date.today()
    out: list[Slot] = []
    taken: list[tuple[int, int]] = []

    def free(m: re.Match[str]) -> bool:
        return not any(m.start() < e and s < m.end() for s, e in taken)

    for m in _ORDER.finditer(text):
        code = next(g for g in m.groups() if g)
        out.append(Slot("order_number", re.sub(r"\s", "", code).upper(), m[0]))
        taken.append(m.span())
        break
    bare = _BARE_ORDER.search(text) if expect == "order_number" and not out else None
    if bare is not None:
        out.append(Slot("order_number", re.sub(r"\s", "", bare[1]).upper(), bare[0]))
        taken.append(bare.span())
    for m in _CN_MOBILE.finditer(text):
        if free(m):
            out.append(Slot("phone", "+86" + re.sub(r"[\s-]", "", m[1]), m[0]))
            taken.append(m.span())
            break
    else:
        for m in _US_PHONE.finditer(text):
            if free(m):
                out.append(Slot("phone", f"+1{m[1]}{m[2]}{m[3]}", m[0]))
                taken.append(m.span())
                break
    for m in _AMOUNT_USD.finditer(text):
        if free(m):
            if m[1]:
                value = _money(m[1], m[2], "USD")
            else:
                value = _money(m[3], m[4] or (m[5] and m[5].zfill(2)), "USD")
            out.append(Slot("amount", value, m[0]))
            taken.append(m.span())
            break
    else:
        for m in _AMOUNT_CNY.finditer(text):
            if free(m):
                whole, frac = (m[1], m[2]) if m[1] else (m[3], m[4])
                out.append(Slot("amount", _money(whole, frac, "CNY"), m[0]))
                taken.append(m.span())
                break
    found = _date(text, today)
    if found is not None:
        out.append(Slot("date", found[0].isoformat(), found[1]))
    return out


def extract_slots(
    text: str, *, today: dt.date | None = None, expect: str | None = None
) -> dict[str, str]:
    """``{slot name: normalised value}`` for the first value of each slot in ``text``."""
    result: dict[str, str] = {}
    for s in extract(text, today=today, expect=expect):
        result.setdefault(s.name, s.value)
    return result


def display(slots: Mapping[str, str], name: str, lang: str) -> str | None:
    """How a slot value is spoken inside an answer ("order A12345" / "订单A12345")."""
    value = slots.get(name)
    if value is None:
        return None
    if name == "order_number":
        return f"订单{value}" if lang == "zh" else f"order {value}"
    return value

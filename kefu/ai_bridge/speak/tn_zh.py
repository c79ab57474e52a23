"""Chinese text normalisation (TN) for TTS: written digits and symbols to spoken Mandarin.

``normalize_zh(text)`` rewrites only the parts of ``text`` that hold ASCII or full-width digits
(text without any digit is returned unchanged); English words and product names keep their
letters. Rules run in this order, each one consuming the digits it reads:

1. phone numbers — mobile (13800138000, 138-0013-8000, +86…), landlines (010-12345678) and
   400/800 numbers, digit by digit with 幺 for 1: 幺三八零零幺三八零零零; +86 → 加八六.
2. codes after a cue word (验证码, 订单号, 单号, 尾号, 工号, 身份证, 密码, …), digit by digit
   with 幺; letters in the code are kept (订单号A123 → 订单号A幺二三).
3. dates — 2024年3月5日, 2024-03-05, 2024/3/5 and 2024.3.5 all → 二零二四年三月五日; a four-digit
   year before 年 is read digit by digit with 一 (一九九八年, 2024-2025年 → 二零二四到二零二五年),
   month and day as cardinals.
4. times — 14:30 → 十四点三十分, 9:05 → 九点零五分, 14:00 → 十四点, 2:15 → 两点十五分,
   seconds → 秒, 9:00-18:00 → 九点到十八点. H:MM is a time only for hours 0–24 and
   minutes 00–59; 1:3 is a ratio (一比三).
5. percentages — 35% → 百分之三十五, 12.5% → 百分之十二点五, 35%-45% → 百分之三十五到百分之四十五;
   ‰ → 千分之.
6. money — ¥12.50, 12.5元 and 12元5角 all read 十二元五角 (元/角/分, 12.05元 → 十二元零五分);
   块 keeps the colloquial units 块/毛/分 (12.5块 → 十二块五毛); $, €, £, HK$ → 美元, 欧元, 英镑,
   港元 with a decimal reading ($9.99 → 九点九九美元).
7. ranges — 3-5天, 3~5天 → 三到五天 (a dash between two numbers followed by a unit or Chinese).
8. units after a number — kg 公斤, km 公里, ℃ 摄氏度 (-5℃ → 零下五摄氏度), m² 平方米, GB G,
   MB 兆, ms 毫秒, km/h 公里每小时, … (the spoken forms a service agent uses: 十G流量, 五百兆).
9. comparisons before a number — ≥ 大于等于, ≤ 小于等于, > 大于, < 小于, ± 正负.
10. every other number — 第3 → 第三 (ordinals never take 两); a bare 2 before a measure word →
    两 (2个 两个, 2点 两点, 2天 两天; but 2号 二号, 2楼 二楼); leading 2 before 千/万/亿 → 两
    (2000 → 两千); decimals → 点 (0.5 → 零点五); a minus sign not after a letter or digit → 负;
    integers written with a leading 0 (007) or of 7+ digits are identifiers, read digit by digit
    with 幺; version-like runs (8.0.1) read 八点零点一; digits stuck to Latin letters are part of a
    model name: up to two digits are a cardinal (iPhone15 → iPhone十五, 5G → 五G), longer runs
    digit by digit with 一 (1080P → 一零八零P, H800 → H八零零).

The output is meant for a Mandarin voice; it is not the inverse of
:func:`kefu.ai_bridge.listen.itn_zh.inverse_normalize_zh`, but plain cardinals round-trip.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kefu.ai_bridge.speak.tn_zh_rules import (
    CURRENCY_PREFIX,
    FULLWIDTH,
    TEMPERATURE_UNITS,
    UNITS,
    cardinal_zh,
    digits_zh,
    int_zh,
    money_zh,
    wants_liang,
)

__all__ = ["normalize_zh"]


def _compile(pattern: str) -> re.Pattern[str]:
    """ASCII digits only: \\d must not match ٣ or other Unicode digits."""
    return re.compile(pattern, re.ASCII)


_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_HAS_DIGIT = _compile(r"\d")
_PHONE = _compile(
    r"(?<![A-Za-z0-9_.])(?:(\+?86)[-\s]?)?"
    r"(1[3-9]\d[-\s]?\d{4}[-\s]?\d{4}|0\d{2,3}-\d{7,8}|[48]00[-\s]?\d{3}[-\s]?\d{4})(?![A-Za-z0-9_])"
)
_CODE = _compile(
    r"((?:验证|校验|动态|取件|提货|邀请|优惠|兑换|激活)码|(?:订单|运单|快递单|物流单|工单|流水"
    r"|发票|批次|序列|会员|房间|车牌|分机|工|卡|账|帐|单)号|编号|尾号|号码|身份证号?|证件号"
    r"|手机号?|电话|密码|ID|SN)"
    r"((?:码)?\s*(?:是|为|:|：)?\s*)([A-Za-z0-9][A-Za-z0-9-]*)"
)
_DATE_ZH = _compile(r"(?<!\d)(\d{4})年(\d{1,2})月(\d{1,2})([日号])")
_DATE_SEP = _compile(r"(?<![\d.])(\d{4})([-/.])(\d{1,2})\2(\d{1,2})(?![\d.])([日号])?")
_YEAR = _compile(r"(?<![\d.])(?:(\d{4})\s*[-~～—–至到]\s*)?(\d{4})(?=\s*年(?!级))")
_TIME = _compile(
    r"(?<![\d.:])(\d{1,2})[:：](\d{2})(?:[:：](\d{2}))?(?![\d.])"
    r"|(?<![\d.:])(\d{1,3})\s*[:：]\s*(\d{1,3})(?![\d.:])"
)
_TIME_RANGE = _compile(r"(\d{1,2}[:：]\d{2})\s*[-~～—–至]\s*(?=\d{1,2}[:：]\d{2})")
_PERCENT = _compile(
    rf"(?<![A-Za-z0-9_.])([-+]?{_NUM})\s*([%‰])?\s*[-~～至到]\s*([-+]?{_NUM})\s*([%‰])"
    rf"|(?<![A-Za-z0-9_.])([-+]?{_NUM})\s*([%‰])"
)
_MONEY_PREFIX = _compile(
    r"(RMB|HK\$|US\$|[¥￥$€£])\s*(" + _NUM + r")(?:\s*(?:元|块|美元|欧元|英镑|港元))?"
)
_MONEY_SUFFIX = _compile(rf"(?<![A-Za-z0-9_.])({_NUM})\s*(元|块)")
_RANGE = _compile(
    rf"(?<![A-Za-z0-9_.\-])({_NUM})\s*[-~～—–]\s*({_NUM})(?=\s*[\u4e00-\u9fff%℃°A-Za-z])"
)
_UNIT_NAMES = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_UNIT = _compile(rf"(?<![A-Za-z0-9_.])(-?{_NUM})\s?({_UNIT_NAMES})(?![A-Za-z0-9])")
_COMPARE = _compile(r"(≥|≤|>=|<=|>|<|±)(?=\s*[-+]?\d)")
_COMPARE_WORDS = {
    "≥": "大于等于",
    ">=": "大于等于",
    "≤": "小于等于",
    "<=": "小于等于",
    ">": "大于",
    "<": "小于",
    "±": "正负",
}
_NUMBER = _compile(r"(\d+(?:\.\d+){2,})|([-−]?)(\d+(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")


def normalize_zh(text: str) -> str:
    """Rewrite digits and symbols in Chinese ``text`` as the words a Mandarin voice says.

    Never raises: a non-string argument gives ``""`` (``None``) or its ``str()``.
    """
    if not isinstance(text, str):
        return "" if text is None else normalize_zh(str(text))
    converted = text.translate(FULLWIDTH)
    if not _HAS_DIGIT.search(converted):
        return text
    for pattern, repl in _RULES:
        converted = pattern.sub(repl, converted)
    return converted


def _phone(m: re.Match[str]) -> str:
    prefix = "加八六" if m.group(1) and m.group(1).startswith("+") else digits_zh(m.group(1) or "")
    return prefix + digits_zh(m.group(2), yao=True)


def _code(m: re.Match[str]) -> str:
    return m.group(1) + m.group(2) + digits_zh(m.group(3), yao=True)


def _month_day(month: str, day: str) -> str | None:
    mo, d = int(month), int(day)
    if not (1 <= mo <= 12 and 1 <= d <= 31):
        return None
    return f"{int_zh(mo)}月{int_zh(d)}"


def _date_zh(m: re.Match[str]) -> str:
    md = _month_day(m.group(2), m.group(3))
    return m.group(0) if md is None else f"{digits_zh(m.group(1))}年{md}{m.group(4)}"


def _date_sep(m: re.Match[str]) -> str:
    md = _month_day(m.group(3), m.group(4))
    if md is None:
        return m.group(0)
    return f"{digits_zh(m.group(1))}年{md}{m.group(5) or '日'}"


def _year(m: re.Match[str]) -> str:
    first = digits_zh(m.group(1)) + "到" if m.group(1) else ""
    return first + digits_zh(m.group(2))


def _hour(h: int) -> str:
    return "两" if h == 2 else int_zh(h)


def _time(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        h, mi = int(m.group(1)), int(m.group(2))
        sec = m.group(3)
        if h <= 24 and mi < 60 and (sec is None or int(sec) < 60):
            out = _hour(h) + "点"
            if mi or sec:
                out += ("零" if mi < 10 else "") + int_zh(mi) + "分"
            if sec is not None and int(sec):
                out += int_zh(int(sec)) + "秒"
            return out
        a, b = m.group(1), m.group(2)
    else:
        a, b = m.group(4), m.group(5)
    return f"{int_zh(int(a))}比{int_zh(int(b))}"


def _time_range(m: re.Match[str]) -> str:
    return m.group(1) + "到"


def _percent(m: re.Match[str]) -> str:
    if m.group(5) is not None:
        return _pct(m.group(5), m.group(6))
    return _pct(m.group(1), m.group(2) or m.group(4)) + "到" + _pct(m.group(3), m.group(4))


def _pct(number: str, sign: str) -> str:
    return ("千分之" if sign == "‰" else "百分之") + cardinal_zh(number, liang=False)


def _money_prefix(m: re.Match[str]) -> str:
    unit = CURRENCY_PREFIX[m.group(1)]
    if unit == "元":
        return money_zh(m.group(2))
    return cardinal_zh(m.group(2)) + unit


def _money_suffix(m: re.Match[str]) -> str:
    if m.group(2) == "块":
        return money_zh(m.group(1), "块", "毛", "分")
    return money_zh(m.group(1))


def _range(m: re.Match[str]) -> str:
    return f"{m.group(1)}到{m.group(2)}"  # the numbers themselves are read by later rules


def _unit(m: re.Match[str]) -> str:
    number, unit = m.group(1), m.group(2)
    word = UNITS[unit]
    if unit in TEMPERATURE_UNITS:
        if number.startswith("-"):
            return "零下" + cardinal_zh(number[1:]) + word
        return cardinal_zh(number) + word
    reading = "两" if number == "2" else cardinal_zh(number)
    return reading + word


def _compare(m: re.Match[str]) -> str:
    return _COMPARE_WORDS[m.group(1)]


def _number(m: re.Match[str]) -> str:
    s = m.string
    before = s[m.start() - 1] if m.start() else ""
    after = s[m.end() :]
    if m.group(1) is not None:  # 8.0.1, 192.168.1.1: each part in turn
        return "点".join(cardinal_zh(p) for p in m.group(1).split("."))
    sign, number = m.group(2), m.group(3)
    if sign and before and before.isascii() and (before.isalnum() or before in "-_."):
        return sign + _number_word(number, before, after)  # a hyphen, not a minus
    return ("负" if sign else "") + _number_word(number, before, after)


def _number_word(number: str, before: str, after: str) -> str:
    latin_before = before.isascii() and before.isalpha()
    latin_after = after[:1].isascii() and after[:1].isalpha()
    if latin_before or latin_after:  # part of a model name: iPhone15, 5G, 1080P, H800
        whole, _, frac = number.partition(".")
        if len(whole) <= 2:
            return cardinal_zh(number, liang=False)
        return digits_zh(whole) + ("点" + digits_zh(frac) if frac else "")
    if before == "第":
        return cardinal_zh(number, liang=False)
    plain = number.isdigit()
    if plain and len(number) > 1 and (number.startswith("0") or len(number) >= 7):
        return digits_zh(number, yao=True)
    if number == "2" and wants_liang(after):
        return "两"
    return cardinal_zh(number)


_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_PHONE, _phone),
    (_CODE, _code),
    (_DATE_ZH, _date_zh),
    (_DATE_SEP, _date_sep),
    (_YEAR, _year),
    (_TIME_RANGE, _time_range),
    (_TIME, _time),
    (_COMPARE, _compare),
    (_PERCENT, _percent),
    (_MONEY_PREFIX, _money_prefix),
    (_MONEY_SUFFIX, _money_suffix),
    (_RANGE, _range),
    (_UNIT, _unit),
    (_NUMBER, _number),
)

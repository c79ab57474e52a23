"""Numeral parser and word lists for Chinese inverse text normalisation (used by :mod:`itn_zh`).

:func:`parse_cardinal` reads a run of Chinese numerals with place units (一百二十, 两万零五,
十万零二十, 三千五百万, 一亿两千万) and the spoken abbreviations that drop the last unit
(一百二 = 120, 三万五 = 35000, 两千三 = 2300). It returns None for anything that is not one
number: two digits in a row (三四百 "three or four hundred"), a run that starts with a unit
(千万 "by all means", 万一 "in case"), units out of order. :func:`parse_digits` reads a
digit-by-digit run (幺三八零零, 二零二四) where 幺 and 〇 are 1 and 0.

cn2an is not used at run time (its import takes ~0.1 s, and ``cn2an.transform`` rewrites
一下 → 1下, 星期一 → 星期1 and warns on 万一); the tests use ``cn2an.cn2an`` as an oracle.
"""

from __future__ import annotations

import re

DIGIT = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "幺": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
SMALL_UNIT = {"十": 10, "百": 100, "千": 1000}
BIG_UNIT = {"万": 10**4, "亿": 10**8}
NUMERAL = "零〇一二两三四五六七八九幺十百千万亿"
SEQ_DIGITS = "零〇一二三四五六七八九幺"
"""Characters of a digit-by-digit reading (两 is never used there)."""

# Words that contain numerals but are not numbers. Matched (longest first) before any
# conversion and restored verbatim afterwards.
PROTECTED_WORDS: tuple[str, ...] = (
    *("一心一意", "三心二意", "一模一样", "一清二楚", "独一无二", "七上八下", "乱七八糟"),
    *("五颜六色", "四面八方", "十全十美", "一五一十", "三三两两", "三番五次", "三番两次"),
    *("一举两得", "两全其美", "接二连三", "一来二去", "不三不四", "三天两头", "千千万万"),
    *("九九归一", "一干二净", "一石二鸟", "一箭双雕", "五花八门", "七嘴八舌", "十拿九稳"),
    *("一路顺风", "一帆风顺", "万无一失", "一目了然", "一言为定", "数一数二", "百分百"),
    *("一下子", "一会儿", "一块儿", "一点儿", "一点点", "一辈子", "一口气", "一方面"),
    *("一部分", "一阵子", "一次性", "不一定", "一刹那", "一毛不拔", "三角形", "五角星"),
    *("一下", "一些", "一样", "一直", "一起", "统一", "一般", "一定", "一切", "一旦"),
    *("一共", "一边", "一会", "一致", "一律", "一向", "一再", "一番", "一同", "一概"),
    *("唯一", "一半", "一道", "一路", "一生", "一流", "一时", "一早", "一贯"),
    *("一阵", "一眼", "一手", "一键", "一线", "一面", "一连", "一并", "万万"),
    *("一口", "一体", "一样", "一律", "一再", "专一", "合一", "万分", "一旁", "一堆"),
    *("二维码", "二手", "三明治", "四川", "九寨沟", "五金", "十字", "一切", "一经"),
)
_TIME_PREFIXES = ("上午", "下午", "晚上", "凌晨", "中午", "早上", "傍晚", "夜里", "半夜", "早晨")
# Context-dependent words, as regular expressions:
#   一点 "a little" (not 一点半, 一点钟, 一点五, 下午一点, 十一点)
#   十分 "very" (not 十分钟, 三点十分)
#   万一 "in case" (not 三万一), 千万 "by all means" (not 三千万)
#   星期一/周一/礼拜天 (kept as words), 第一 … 第十 (kept: 第一次)
PROTECTED_PATTERNS: tuple[str, ...] = (
    "".join(f"(?<!{p})" for p in _TIME_PREFIXES)
    + "(?<![零〇一二两三四五六七八九十])一点(?![钟半整零〇一二两三四五六七八九十]|\\d)",
    "(?<![点零〇一二两三四五六七八九十百])十分(?![钟之])",
    "(?<![零〇一二两三四五六七八九十百千])[万千]万|(?<![零〇一二两三四五六七八九十百千])万一",
    "(?:星期|礼拜|周)[一二三四五六日天]",
    "(?<!分)之一",  # 其中之一 (but 百分之一 is 1%)
    "第[一二三四五六七八九十](?![零〇一二两三四五六七八九十百千万亿幺])",
    "[\ue000-\uf8ff]",  # private-use characters are the placeholders: keep any given to us
)


def parse_digits(run: str) -> str | None:
    """``"幺三八零"`` → ``"1380"``; None when ``run`` holds anything but single digits."""
    out = []
    for ch in run:
        if ch not in SEQ_DIGITS:
            return None
        out.append(str(DIGIT[ch]))
    return "".join(out)


def parse_cardinal(run: str) -> int | None:
    """Value of a Chinese cardinal such as 一百二十 or 三万五; None if ``run`` is not one."""
    if not run or run[0] in BIG_UNIT or run[0] in "百千":
        return None
    total = 0  # completed 亿 part
    wan = 0  # completed 万 part
    section = 0  # below 万
    num: int | None = None
    small = 10**9  # last small unit in this section (they must decrease)
    last_unit = 1  # unit just before the final digit, for 一百二 = 120
    zero = False
    for ch in run:
        if ch in "零〇":
            if num is not None:
                return None
            zero = True
            continue
        d = DIGIT.get(ch)
        if d is not None:
            if num is not None or ch == "幺":
                return None
            num = d
            continue
        if ch in SMALL_UNIT:
            u = SMALL_UNIT[ch]
            if num is None:
                if u != 10:
                    return None
                num = 1  # 十五, 两万十
            if u >= small:
                return None
            section += num * u
            small, last_unit, num, zero = u, u, None, False
            continue
        u = BIG_UNIT[ch]
        if num is not None:
            section += num
        if section == 0 or (u == 10**4 and wan):
            return None
        if u == 10**8:
            if total:
                return None
            total = (wan + section) * u
            wan = 0
        else:
            wan = section * u
        section, num, small, last_unit, zero = 0, None, 10**9, u, False
    if num is not None:
        if not zero and last_unit >= 100:
            num *= last_unit // 10  # 一百二 = 120, 三万五 = 35000
        section += num
    return total + wan + section


def money_text(yuan: int, jiao: int, fen: int) -> str:
    """``120, 5, 0`` → ``"120.5元"``: digits with a dot, trailing zeros dropped."""
    cents = yuan * 100 + jiao * 10 + fen
    whole, frac = divmod(cents, 100)
    if not frac:
        return f"{whole}元"
    return f"{whole}.{frac:02d}".rstrip("0") + "元"


def compile_protected() -> re.Pattern[str]:
    words = sorted(set(PROTECTED_WORDS), key=len, reverse=True)
    return re.compile("|".join([*PROTECTED_PATTERNS, *map(re.escape, words)]))

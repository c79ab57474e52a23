"""Number readers and tables for Mandarin text normalisation (used by :mod:`tn_zh`).

Pure functions from digit strings to the Chinese a Mandarin voice should say:

* :func:`int_zh` — cardinal reading of an integer below 10^12 (一千二百三十四, 十万零二十,
  一万零五; "一十" only inside a number: 十五 but 一百一十五). A leading 2 before 千/万/亿
  reads 两 (两千, 两万三千), the usual spoken form; 200 stays 二百.
* :func:`cardinal_zh` — a written number with sign, thousands commas and decimals
  (-1,234.05 → 负一千二百三十四点零五); integers of more than 12 digits are read digit by digit.
* :func:`digits_zh` — digit by digit; ``yao=True`` reads 1 as 幺 (phone numbers, codes), so it
  is not confused with 7 on a phone line; letters in codes are kept.
* :func:`money_zh` — 元/角/分 reading of an amount (128.50 → 一百二十八元五角,
  12.05 → 十二元零五分, 0.5 → 五角); more than two decimals fall back to 点 (零点一二五元).

cn2an is deliberately not used at run time: its import takes ~0.1 s (it loads a YAML config and
the ``proces`` package) and each reading here is a few lines. The tests use cn2an as an
independent oracle for :func:`int_zh`.
"""

from __future__ import annotations

DIGITS = "零一二三四五六七八九"
DIGITS_YAO = "零幺二三四五六七八九"
MAX_CARDINAL_DIGITS = 12
"""Integers longer than this are read digit by digit (identifiers, not quantities)."""

# Measure words after which a bare 2 is read 两 (两个, 两点, 两天), not 二 (二号, 二楼, 二月).
LIANG_MEASURES: tuple[str, ...] = (
    *("个月", "小时", "分钟", "星期", "礼拜", "公斤", "公里", "千克", "平方", "英寸"),
    *("个", "位", "件", "本", "张", "台", "只", "条", "次", "天", "周", "年", "秒", "点"),
    *("倍", "种", "家", "辆", "部", "份", "把", "双", "对", "套", "瓶", "杯", "碗", "斤"),
    *("米", "岁", "名", "人", "项", "遍", "趟", "顿", "盒", "袋", "箱", "包", "块", "毛"),
    *("角", "元", "万", "千", "百", "亿", "批", "支", "颗", "片", "间", "所", "层", "折"),
    *("笔", "单", "节", "届", "期", "代", "款", "克", "升", "吨", "G", "T", "兆"),
)
NOT_LIANG: tuple[str, ...] = ("年级", "点五", "周年")
"""Exceptions: 二年级; a decimal written as 2点5; 二周年."""

# Units written in Latin letters or symbols, longest first so "km/h" wins over "km".
UNITS: dict[str, str] = {
    "km/h": "公里每小时",
    "m/s": "米每秒",
    "km²": "平方公里",
    "kWh": "千瓦时",
    "mAh": "毫安时",
    "Mbps": "兆",
    "Gbps": "G",
    "kHz": "千赫",
    "MHz": "兆赫",
    "GHz": "吉赫",
    "fps": "帧每秒",
    "min": "分钟",
    "°C": "摄氏度",
    "°F": "华氏度",
    "kg": "公斤",
    "Kg": "公斤",
    "KG": "公斤",
    "mg": "毫克",
    "km": "公里",
    "cm": "厘米",
    "mm": "毫米",
    "m²": "平方米",
    "m2": "平方米",
    "m³": "立方米",
    "m3": "立方米",
    "ml": "毫升",
    "mL": "毫升",
    "TB": "T",
    "GB": "G",
    "MB": "兆",
    "KB": "K",
    "Hz": "赫兹",
    "ms": "毫秒",
    "kW": "千瓦",
    "px": "像素",
    "℃": "摄氏度",
    "℉": "华氏度",
    "㎡": "平方米",
    "°": "度",
    "m": "米",
    "g": "克",
    "L": "升",
    "s": "秒",
    "h": "小时",
    "W": "瓦",
    "V": "伏",
}
TEMPERATURE_UNITS = frozenset({"℃", "°C", "℉", "°F", "°"})

CURRENCY_PREFIX: dict[str, str] = {
    "¥": "元",
    "￥": "元",
    "RMB": "元",
    "HK$": "港元",
    "US$": "美元",
    "$": "美元",
    "€": "欧元",
    "£": "英镑",
}

# 1:1 maps for full-width ASCII look-alikes that carry numbers (Chinese punctuation such as
# ，。：（） is kept: the clause splitter relies on it).
FULLWIDTH = str.maketrans(
    "０１２３４５６７８９％．－＋／～＄ＡＢＣＤＥＦＧＨＩＪＫＬＭＮＯＰＱＲＳＴＵＶＷＸＹＺ"
    "ａｂｃｄｅｆｇｈｉｊｋｌｍｎｏｐｑｒｓｔｕｖｗｘｙｚ",
    "0123456789%.-+/~$ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
)


def _four(n: int) -> str:
    """Reading of 1..9999 with inner zeros collapsed to one 零 (1010 → 一千零一十)."""
    out: list[str] = []
    zero = False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value % 10
        if d == 0:
            zero = bool(out)
            continue
        if zero:
            out.append("零")
            zero = False
        out.append(DIGITS[d] + unit)
    return "".join(out)


def int_zh(n: int, *, liang: bool = True) -> str:
    """Cardinal reading of ``0 <= n < 10**12`` (a larger ``n`` is read digit by digit)."""
    if n < 0:
        return "负" + int_zh(-n, liang=liang)
    if n == 0:
        return "零"
    if n >= 10**MAX_CARDINAL_DIGITS:
        return digits_zh(str(n))
    groups = (n // 10**8, n // 10**4 % 10**4, n % 10**4)
    out = ""
    gap = False
    for g, unit in zip(groups, ("亿", "万", ""), strict=True):
        if g == 0:
            gap = bool(out)
            continue
        if out and (gap or g < 1000):
            out += "零"
        out += _four(g) + unit
        gap = False
    if out.startswith("一十"):
        out = out[1:]
    if liang and out.startswith("二") and out[1:2] in ("千", "万", "亿"):
        out = "两" + out[1:]
    return out


def digits_zh(s: str, *, yao: bool = False) -> str:
    """Digit-by-digit reading; letters are kept, separators (space, -, .) are dropped."""
    table = DIGITS_YAO if yao else DIGITS
    return "".join(table[ord(c) - 48] if "0" <= c <= "9" else c for c in s if c not in " -.")


def cardinal_zh(s: str, *, liang: bool = True) -> str:
    """Reading of a written decimal number: optional sign, commas, fraction digits."""
    sign = ""
    if s[:1] in "-−":
        sign, s = "负", s[1:]
    elif s[:1] == "+":
        sign, s = "正", s[1:]
    whole, _, frac = s.replace(",", "").partition(".")
    if not whole.isdigit():
        whole = "0"
    if len(whole.lstrip("0")) > MAX_CARDINAL_DIGITS:
        out = digits_zh(whole)
    else:
        out = int_zh(int(whole), liang=liang)
    if frac.isdigit():
        out += "点" + digits_zh(frac)
    return sign + out


def money_zh(amount: str, yuan: str = "元", jiao: str = "角", fen: str = "分") -> str:
    """元/角/分 reading of a non-negative amount written with an optional decimal part."""
    whole, _, frac = amount.replace(",", "").partition(".")
    whole = whole or "0"
    if len(frac) > 2 or len(whole.lstrip("0")) > MAX_CARDINAL_DIGITS or not whole.isdigit():
        return cardinal_zh(amount) + yuan
    frac = (frac + "00")[:2]
    y, j, f = int(whole), int(frac[0]), int(frac[1])
    out = ""
    if y or not (j or f):
        out = ("两" if y == 2 else int_zh(y)) + yuan
    if j:
        out += ("两" if j == 2 else DIGITS[j]) + jiao
    if f:
        if y and not j:
            out += "零"
        out += ("两" if f == 2 else DIGITS[f]) + fen
    return out


def wants_liang(after: str) -> bool:
    """Is a bare 2 followed by ``after`` read 两 (two of something) rather than 二?"""
    after = after.lstrip(" ")
    if after.startswith(NOT_LIANG):
        return False
    return after.startswith(LIANG_MEASURES)

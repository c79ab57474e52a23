"""Chinese inverse text normalisation (ITN) for ASR transcripts: spoken numerals to digits.

``inverse_normalize_zh(text)`` rewrites the numbers in a Mandarin transcript as digits so that
slot extraction (amounts, dates, phone and order numbers) can read them, and leaves words that
merely contain numerals alone. Conventions of the output:

* digit strings — a run of three or more single digits (幺三八零零幺三八零零零, 一二三四五,
  二零二四) is read digit by digit → 13800138000; two digits only with 零/幺/〇 or before 年
  (九八年 → 98年); 三四/五六 ("three or four") stay words.
* cardinals — any run with a place unit → its value: 两百 → 200, 一百二 → 120, 三万五 → 35000,
  十万零二十 → 100020. A run that starts with 百/千/万/亿 (千万, 万一, 百万) is not a number.
* single numerals (一, 两, 五, 十 …) stay words (一个, 两个, 三心二意) unless a unit that slots
  care about follows: 月 号 日 点 年 天 岁 分钟 秒 小时 度 楼 层 倍 折 公斤 公里 斤 米 %…
  (三月五号 → 3月5号, 五天 → 5天); 一 takes fewer units (一天, 一年 stay), or they follow
  Latin letters (iPhone 十 → iPhone 10).
* money — always 元 with a decimal amount: 一百二十块五 → 120.5元, 三块五毛二 → 3.52元,
  十二元五角 → 12.5元, 两块钱 → 2元, 五毛钱 → 0.5元. 块 followed by a noun is a classifier
  (一块蛋糕 stays; 十块蛋糕 → 10块蛋糕).
* times — 12-hour words are kept and minutes are two digits: 下午三点半 → 下午3点30分,
  三点一刻 → 3点15分, 十点零五分 → 10点05分, 三点五十 → 3点50分, 两点 → 2点. No 24-hour
  conversion (下午三点 is not rewritten 15:00): whether 晚上十二点 is today or tomorrow is for
  the slot filler to decide.
* decimals, percentages, negatives — 三点五 → 3.5, 百分之五十 → 50%, 百分之十二点五 → 12.5%,
  负五 → -5.
* kept as words — 一下 一些 一点 ("a little": 便宜一点; but 一点半, 下午一点 are times) 一样 一直
  一起 统一 万一 千万 十分 ("very"; 十分钟 → 10分钟) 一心一意 三心二意 and other idioms, 星期一
  周一 礼拜天, 第一 … 第十 (第一次 stays; 第二十三 → 第23).

The protected words are swapped for private-use placeholder characters before the rules run
and restored afterwards, so no rule can reach into them.
"""

from __future__ import annotations

import re

from kefu.ai_bridge.listen.itn_zh_rules import (
    DIGIT,
    SEQ_DIGITS,
    compile_protected,
    money_text,
    parse_cardinal,
    parse_digits,
)

__all__ = ["inverse_normalize_zh"]

_N = "[零〇一二两三四五六七八九幺十百千万亿]"
_S = "[零〇一二三四五六七八九幺]"
_NUMERALS = _N[1:-1]
_HAS_NUMERAL = re.compile(_N)
_PROTECTED = compile_protected()
_PLACEHOLDER = re.compile("[\ue000-\uf8ff]")
_PUA_START, _PUA_SIZE = 0xE000, 0xF8FF - 0xE000 + 1
_CHUNK = 2000
_PERCENT = re.compile(rf"百分之({_N}+(?:点{_S}+)?)")
_NEGATIVE = re.compile(rf"负({_N}+(?:点{_S}+)?)")
_MONEY = re.compile(
    rf"({_N}+)(块|元)(钱)?(?:({_N})(毛|角)?(?:({_N})(分)?)?)?",
)
_SMALL_MONEY = re.compile(rf"(?<!{_N})({_N})(毛|角)钱")
_TIME = re.compile(rf"({_N}+)点(?:(半)|(一刻|三刻)|({_N}+)(分(?!钟))?|(整|钟))")
_DECIMAL = re.compile(rf"({_N}+)点({_S}+)")
_RUN = re.compile(f"{_N}+")
_TIME_PREFIX = re.compile("(?:上午|下午|晚上|凌晨|中午|早上|傍晚|夜里|半夜|早晨)$")
_PARTICLES = "吗呢吧啊了的呀哦嘛啦哈"
_UNITS_ANY: tuple[str, ...] = (
    *("分钟", "秒钟", "小时", "个月", "周岁", "公斤", "千克", "公里", "厘米", "毫米", "平米"),
    *("月", "号", "日", "点", "秒", "岁", "年", "天", "度", "楼", "层", "倍", "折", "斤"),
    *("克", "米", "元", "%", "G", "兆", "K"),
)
_UNITS_ONE: tuple[str, ...] = (
    *("分钟", "秒钟", "小时", "周岁", "公斤", "千克", "公里", "厘米", "毫米", "平米"),
    *("月", "号", "日", "点", "秒", "岁", "楼", "层", "倍", "折", "斤", "元", "%", "G"),
)


def inverse_normalize_zh(text: str) -> str:
    """Rewrite the spoken numbers in a Chinese transcript as digits (see the module notes).

    Never raises: a non-string argument gives ``""`` (``None``) or its ``str()``.
    """
    if not isinstance(text, str):
        return "" if text is None else inverse_normalize_zh(str(text))
    if not _HAS_NUMERAL.search(text):
        return text
    if len(text) > _CHUNK:  # keeps the placeholders within the private-use area
        return "".join(_convert(piece) for piece in _chunks(text))
    return _convert(text)


def _chunks(text: str) -> list[str]:
    out = []
    while len(text) > _CHUNK:
        window = text[:_CHUNK]
        cut = max(window.rfind(p) for p in "。！？；，\n ,.!?;")
        cut = cut + 1 if cut > _CHUNK // 2 else _CHUNK
        out.append(text[:cut])
        text = text[cut:]
    out.append(text)
    return out


def _convert(text: str) -> str:
    saved: list[str] = []

    def stash(m: re.Match[str]) -> str:
        saved.append(m.group(0))
        return chr(_PUA_START + len(saved) - 1)

    text = _PROTECTED.sub(stash, text)
    assert len(saved) <= _PUA_SIZE
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    if saved:
        text = _PLACEHOLDER.sub(lambda m: saved[ord(m.group(0)) - _PUA_START], text)
    return text


def _value(run: str) -> int | None:
    """A run read as a cardinal, or digit by digit when it has no place unit."""
    v = parse_cardinal(run)
    if v is None:
        digits = parse_digits(run)
        v = int(digits) if digits else None
    return v


def _number(run: str, frac: str | None) -> str | None:
    whole = _value(run)
    if whole is None:
        return None
    digits = parse_digits(frac) if frac else None
    return f"{whole}.{digits}" if digits else str(whole)


def _percent(m: re.Match[str]) -> str:
    run, _, frac = m.group(1).partition("点")
    value = "100" if run == "百" and not frac else _number(run, frac)
    return m.group(0) if value is None else f"{value}%"


def _negative(m: re.Match[str]) -> str:
    run, _, frac = m.group(1).partition("点")
    value = _number(run, frac)
    return m.group(0) if value is None else f"-{value}"


def _money(m: re.Match[str]) -> str:
    yuan = _value(m.group(1))
    if yuan is None:
        return m.group(0)
    unit, qian, j, ju, f, fu = m.group(2, 3, 4, 5, 6, 7)
    end = m.end(3) if qian else m.end(2)
    jiao = fen = 0
    if j is not None and not qian:
        jd, fd = DIGIT.get(j), DIGIT.get(f) if f else None
        if jd is not None and ju:  # 三块五毛二, 十二元五角三分
            jiao, end = jd, m.end(5)
            if fd is not None:
                fen, end = fd, m.end(7) if fu else m.end(6)
        elif jd is not None and j in "零〇" and fd is not None and fu:  # 十块零五分
            fen, end = fd, m.end(7)
        elif jd is not None and unit == "块" and not _is_noun(m.string, m.end(4)):
            jiao, end = jd, m.end(4)  # 一百二十块五
    if unit == "块" and not qian and end == m.end(2) and _is_noun(m.string, end):
        return m.group(0)  # 一块蛋糕: 块 is a classifier here
    if m.string.startswith("钱", end):
        end += 1
    return money_text(yuan, jiao, fen) + m.string[end : m.end()]


def _is_noun(s: str, i: int) -> bool:
    """Does a Chinese character other than a particle or numeral start at ``s[i]``?"""
    ch = s[i : i + 1]
    if not ch or not "\u4e00" <= ch <= "\u9fff":
        return False
    return ch not in _PARTICLES and ch not in _NUMERALS and ch != "钱"


def _small_money(m: re.Match[str]) -> str:
    d = DIGIT.get(m.group(1))
    return m.group(0) if d is None else money_text(0, d, 0)


def _time(m: re.Match[str]) -> str:
    hour = _value(m.group(1))
    if hour is None or hour > 24:
        return m.group(0)
    h = f"{hour}点"
    half, quarter, minutes, fen, whole = m.group(2, 3, 4, 5, 6)
    if half:
        return h + "30分"
    if quarter:
        return h + ("15分" if quarter == "一刻" else "45分")
    if whole:
        return h + whole
    timeish = fen or "十" in minutes or _TIME_PREFIX.search(m.string, 0, m.start())
    value = _value(minutes)
    if not timeish or value is None or value >= 60:
        return m.group(0)  # 三点五 is a decimal
    return f"{h}{value:02d}分"


def _decimal(m: re.Match[str]) -> str:
    value = _number(m.group(1), m.group(2))
    return m.group(0) if value is None else value


def _run(m: re.Match[str]) -> str:
    run, s = m.group(0), m.string
    after = s[m.end() :]
    if len(run) >= 2:
        digits = parse_digits(run)
        if digits is not None:
            zero = any(c in "零〇幺" for c in run)
            return digits if len(run) >= 3 or zero or after.startswith("年") else run
        value = parse_cardinal(run)
        return run if value is None else str(value)
    if run not in SEQ_DIGITS and run not in "两十":
        return run
    before = s[max(0, m.start() - 2) : m.start()]
    latin = before[-1:].isascii() and before[-1:].isalpha()
    latin = latin or (before[-1:] == " " and before[:1].isascii() and before[:1].isalnum())
    if latin or after.startswith(_UNITS_ONE if run in "一幺" else _UNITS_ANY):
        value = parse_cardinal(run) if run != "幺" else 1
        return run if value is None else str(value)
    return run


_RULES = (
    (_PERCENT, _percent),
    (_NEGATIVE, _negative),
    (_MONEY, _money),
    (_SMALL_MONEY, _small_money),
    (_TIME, _time),
    (_DECIMAL, _decimal),
    (_RUN, _run),
)

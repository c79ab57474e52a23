"""Text preparation for streaming TTS: normalisation, clause splitting, an SSML subset.

Streaming synthesis renders one clause at a time, so where the text is cut decides both the
latency of the first packet (a short first clause) and the prosody (cutting mid-phrase
sounds wrong). Cuts happen only at punctuation that ends a sentence or a clause, in English
(``. ! ? ; : ,`` followed by a space) and Chinese (``。！？；，、：…``), never inside a number
(3.5, 1,000) or an identifier (A-123.45/B), because those have no space after the mark.

SSML subset (W3C SSML 1.1): ``<speak>``, ``<break time|strength>``, ``<prosody rate pitch
volume>``, ``<emphasis level>``, ``<say-as interpret-as="digits|telephone|characters">``,
``<sub alias>``, ``<p>``/``<s>``, and kefu's own ``<kefu:emotion name=...>`` or an ``emotion``
attribute on any element. Unknown elements are transparent (their text is spoken), as the
SSML spec asks of processors; a malformed document raises :class:`SsmlError`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from kefu.ai_bridge.speak.base import EMOTIONS, TtsError


class SsmlError(TtsError):
    """An SSML document could not be parsed (mismatched tags, bad attribute values)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of text with one prosody, or a pause (empty ``text``)."""

    text: str
    """Normalised text to speak; empty for a pure pause."""
    emotion: str = "neutral"
    """One of EMOTIONS (kefu extension ``<kefu:emotion>``)."""
    rate: float = 1.0
    """Speaking-rate factor (SSML 1.1 §3.2.4 prosody ``rate``)."""
    pitch: float = 1.0
    """Pitch factor (SSML 1.1 §3.2.4 prosody ``pitch``)."""
    volume: float = 1.0
    """Linear gain (SSML 1.1 §3.2.4 prosody ``volume``)."""
    pause_ms: float = 0.0
    """Silence after the text (SSML 1.1 §3.2.3 ``break``)."""


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_ZH_TERMINAL = "。！？；，、：…"
_EN_TERMINAL = ".!?;:,"
_CLOSERS = "\"'”’)]）】」』"
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st sr jr vs etc e.g i.e no inc ltd co corp approx dept a.m p.m u.s".split()
)
_ZH_CUT_AFTER = frozenset("的了是后时吗呢吧")
_ZH_CUT_BEFORE: tuple[str, ...] = (
    *("并且", "而且", "但是", "因为", "所以", "如果", "然后", "或者", "还是", "以及"),
    *("在", "把", "可以", "请", "我们"),
)
_CONJUNCTIONS = frozenset(
    "and but or so because which that when while if then after before until".split()
)


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a Chinese character (the router's language guess)."""
    return _CJK.search(text) is not None


# --- normalisation ---------------------------------------------------------------------

_FULLWIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF10, 0xFF1A)} | {
    cp: cp - 0xFEE0 for cp in [*range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B)]
}
_MARKDOWN = re.compile(r"(\*\*|__|`+|^#+\s*|^\s*[-*•]\s+)", re.MULTILINE)
_ZH_DIGITS = "零一二三四五六七八九"
# Telephone numbers in Mandarin read 1 as "yāo" so it is not confused with 7.
_ZH_PHONE_DIGITS = "零幺二三四五六七八九"


def normalize_text(text: str, lang: str | None = None) -> str:
    """Make text speakable: no markup residue, ASCII digits, one space between words.

    Full-width digits and Latin letters become ASCII, but Chinese punctuation is kept
    (NFKC would turn ``，`` into ``,`` and lose the clause boundary rule for Chinese).
    """
    zh = has_cjk(text) if lang is None else lang.startswith("zh")
    text = text.translate(_FULLWIDTH)
    text = _MARKDOWN.sub("", text)
    text = text.replace("…", "…" if zh else "...")
    if zh:
        text = re.sub(r"(\d+(?:\.\d+)?)\s*[%％]", r"百分之\1", text)
        text = text.replace("&", "和")
    else:
        text = re.sub(r"(\d)\s*%", r"\1 percent", text)
        text = re.sub(r"\s&\s", " and ", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+(?=[,.!?;:，。！？；：、])", "", text)
    if zh:
        # Spaces between Chinese characters are layout, not pauses.
        text = re.sub(r"(?<=[\u3400-\u9fff，。！？；：、]) (?=[\u3400-\u9fff])", "", text)
    return text


def say_as(text: str, interpret_as: str, *, zh: bool) -> str:
    """Render ``<say-as>`` content (SSML 1.1 §3.1.9; values from the W3C say-as note)."""
    kind = interpret_as.lower()
    if kind in ("digits", "telephone"):
        chars = [c for c in text if c.isalnum()]
        if zh:
            table = _ZH_PHONE_DIGITS if kind == "telephone" else _ZH_DIGITS
            return "".join(table[int(c)] if c.isdigit() else c for c in chars)
        if kind == "telephone":
            # Groups keep the caller's rhythm: "555-0100" is read as two groups.
            groups = [g for g in re.split(r"[^0-9A-Za-z]+", text) if g]
            return ", ".join(" ".join(g) for g in groups)
        return " ".join(chars)
    if kind in ("characters", "spell-out"):
        chars = [c for c in text if not c.isspace()]
        return ("" if zh else " ").join(chars)
    return text


# --- clause splitting ------------------------------------------------------------------


def _is_boundary(text: str, i: int) -> bool:
    """Is the punctuation at ``text[i]`` the end of a clause?"""
    ch = text[i]
    if ch in _ZH_TERMINAL:
        return True
    if ch not in _EN_TERMINAL:
        return False
    j = i + 1
    while j < len(text) and (text[j] in _CLOSERS or text[j] in _EN_TERMINAL):
        j += 1
    if j < len(text) and not (text[j].isspace() or _CJK.match(text[j])):
        return False  # 3.5, 1,000, A-12.3/B, "e.g.x": no space after, not a boundary
    if ch == ".":
        word = re.search(r"([A-Za-z.]+)$", text[:i])
        if word:
            w = word.group(1).lower().rstrip(".")
            if w in _ABBREVIATIONS or (len(w) == 1 and text[i - 1].isupper()):
                return False
    return True


def _raw_clauses(text: str) -> list[str]:
    clauses: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        if _is_boundary(text, i):
            # Keep runs like "?!" and closing quotes with the clause they end.
            j = i + 1
            while j < len(text) and (
                text[j] in _CLOSERS or text[j] in _EN_TERMINAL or text[j] in _ZH_TERMINAL
            ):
                j += 1
            clauses.append(text[start:j])
            start = i = j
            continue
        i += 1
    clauses.append(text[start:])
    out: list[str] = []
    for clause in (c.strip() for c in clauses):
        if not clause:
            continue
        if out and not any(c.isalnum() for c in clause):
            out[-1] += clause  # a stray mark belongs to the clause before it
        else:
            out.append(clause)
    return out


def _units(text: str) -> int:
    """Rough speech length: one per Latin word or number, one per Chinese character."""
    return len(_CJK.findall(text)) + len(re.findall(r"[A-Za-z0-9][\w.,'/-]*", text))


def _cut(clause: str, limit: int) -> tuple[str, str] | None:
    """Cut ``clause`` after about ``limit`` units at a safe place, or None if it is short.

    Latin text is cut only at spaces (so ids and numbers stay whole), preferably before a
    conjunction; Chinese text is cut between two Chinese characters, preferably after a
    particle or before a conjunction so a word is not broken in two.
    """
    if _units(clause) <= limit + 2:  # a 1–2 unit tail would sound worse than waiting
        return None
    fallback: int | None = None
    preferred: int | None = None
    for m in re.finditer(r" |(?<=[\u3400-\u9fff])(?=[\u3400-\u9fff])", clause):
        n = _units(clause[: m.start()])
        if n < max(2, limit // 2):
            continue
        if n > limit + 2:
            break
        if n <= limit:
            fallback = m.start()
        after = clause[m.end() :]
        if m.group() == " ":
            good = after.split(" ", 1)[0].lower() in _CONJUNCTIONS
        else:
            good = clause[m.start() - 1] in _ZH_CUT_AFTER or after.startswith(_ZH_CUT_BEFORE)
        if good and _units(after) > 2:
            preferred = m.start()
    best = preferred if preferred is not None else fallback
    if best is None:
        return None
    return clause[:best].strip(), clause[best:].strip()


def split_clauses(
    text: str,
    *,
    first_max_words: int = 6,
    first_max_chars: int = 14,
    max_words: int = 20,
    max_chars: int = 40,
) -> list[str]:
    """Split normalised text into clauses to synthesise one after another.

    The first clause is kept short (``first_max_words`` English words or ``first_max_chars``
    Chinese characters) so its audio is ready early; later clauses are cut only when
    longer than ``max_words`` / ``max_chars``.
    """
    zh = has_cjk(text)
    first_limit = first_max_chars if zh else first_max_words
    limit = max_chars if zh else max_words
    out: list[str] = []
    for clause in _raw_clauses(text):
        rest: str | None = clause
        while rest:
            cut = _cut(rest, first_limit if not out else limit)
            if cut is None:
                out.append(rest)
                rest = None
            else:
                out.append(cut[0])
                rest = cut[1]
    return out


# --- SSML ------------------------------------------------------------------------------

_TAG = re.compile(r"<(/?)([A-Za-z][\w:.-]*)((?:\s+[^<>]*?)?)\s*(/?)>|<!--.*?-->|<\?.*?\?>", re.S)
_ATTR = re.compile(r"([\w:.-]+)\s*=\s*(\"[^\"]*\"|'[^']*')")
_BREAK_STRENGTH = {
    "none": 0.0,
    "x-weak": 100.0,
    "weak": 200.0,
    "medium": 400.0,
    "strong": 700.0,
    "x-strong": 1000.0,
}
_RATE_WORDS = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25}
_RATE_WORDS["x-fast"] = 1.5
_PITCH_WORDS = {"x-low": 0.8, "low": 0.9, "medium": 1.0, "default": 1.0, "high": 1.1}
_PITCH_WORDS["x-high"] = 1.2
_VOLUME_WORDS = {"silent": 0.0, "x-soft": 0.5, "soft": 0.7, "medium": 1.0, "default": 1.0}
_VOLUME_WORDS |= {"loud": 1.3, "x-loud": 1.6}
# Emphasis: slower and louder, as the SSML spec suggests for "strong".
_EMPHASIS = {"strong": (0.85, 1.25), "moderate": (0.92, 1.12), "none": (1.0, 1.0)}
_EMPHASIS["reduced"] = (1.05, 0.85)
_MAX_PAUSE_MS = 5000.0


def _attrs(raw: str) -> dict[str, str]:
    return {k.lower(): html.unescape(v[1:-1]) for k, v in _ATTR.findall(raw)}


def _time_ms(value: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*", value)
    if not m:
        raise SsmlError(f"break time {value!r} is not like '500ms' or '1.5s'")
    ms = float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
    return min(ms, _MAX_PAUSE_MS)


def _factor(value: str, words: dict[str, float], what: str) -> float:
    """A prosody value as a multiplier: a keyword, ``120%``, ``+10%``, ``-2st``, ``+6dB``."""
    v = value.strip().lower()
    if v in words:
        return words[v]
    m = re.fullmatch(r"([+-]?)(\d+(?:\.\d+)?)(%|st|db|hz)?", v)
    if not m:
        raise SsmlError(f"prosody {what} {value!r} not understood")
    sign, num, unit = m.group(1), float(m.group(2)), m.group(3)
    signed = -num if sign == "-" else num
    if unit == "%":
        return max(0.0, 1.0 + signed / 100.0) if sign else num / 100.0
    if unit == "st":
        return float(2.0 ** (signed / 12.0))
    if unit == "db":
        return float(10.0 ** (signed / 20.0))
    if unit == "hz":
        return 1.0  # absolute pitch cannot be honoured by either voice; keep the base
    return num  # a bare number is a multiplier (SSML 1.1 rate)


@dataclass(frozen=True, slots=True)
class _Style:
    emotion: str = "neutral"
    rate: float = 1.0
    pitch: float = 1.0
    volume: float = 1.0
    say_as: str | None = None
    alias: str | None = None


def _open(tag: str, attrs: dict[str, str], style: _Style) -> _Style:
    emotion = attrs.get("emotion", style.emotion)
    if tag in ("kefu:emotion", "emotion"):
        emotion = attrs.get("name", emotion)
    if emotion not in EMOTIONS:
        raise SsmlError(f"unknown emotion {emotion!r} on <{tag}>")
    rate, pitch, volume = style.rate, style.pitch, style.volume
    if tag == "prosody":
        rate *= _factor(attrs.get("rate", "1"), _RATE_WORDS, "rate") or 1.0
        pitch *= _factor(attrs.get("pitch", "1"), _PITCH_WORDS, "pitch") or 1.0
        volume *= _factor(attrs.get("volume", "1"), _VOLUME_WORDS, "volume")
    elif tag == "emphasis":
        level = attrs.get("level", "moderate")
        if level not in _EMPHASIS:
            raise SsmlError(f"emphasis level {level!r} not understood")
        rate *= _EMPHASIS[level][0]
        volume *= _EMPHASIS[level][1]
    say = attrs.get("interpret-as") if tag == "say-as" else style.say_as
    alias = attrs.get("alias") if tag == "sub" else style.alias
    return _Style(emotion, rate, pitch, volume, say, alias)


def parse_ssml(document: str, *, emotion: str = "neutral", rate: float = 1.0) -> list[Segment]:
    """Parse SSML (or plain text) into segments; adjacent runs with one style are merged.

    Plain text without a ``<speak>`` root is one segment with the given emotion and rate.
    """
    zh = has_cjk(document)
    base = _open("speak", {"emotion": emotion}, _Style(rate=rate))
    if not is_ssml(document):
        text = normalize_text(document)
        return [Segment(text, base.emotion, base.rate)] if text else []
    stack: list[tuple[str, _Style]] = [("", base)]
    segments: list[Segment] = []

    def emit_text(raw: str) -> None:
        style = stack[-1][1]
        if style.alias is not None:
            return  # <sub>'s content is replaced by its alias at the open tag
        text = html.unescape(raw)
        if style.say_as:
            text = " " + say_as(text, style.say_as, zh=zh) + " "
        add(text, style)

    def add(text: str, style: _Style, pause_ms: float = 0.0) -> None:
        last = segments[-1] if segments else None
        same = last is not None and (last.emotion, last.rate, last.pitch, last.volume) == (
            style.emotion,
            style.rate,
            style.pitch,
            style.volume,
        )
        if last is not None and last.pause_ms == 0.0 and (same or not text.strip()):
            segments[-1] = Segment(
                last.text + text, last.emotion, last.rate, last.pitch, last.volume, pause_ms
            )
        elif text.strip() or pause_ms:
            segments.append(
                Segment(text, style.emotion, style.rate, style.pitch, style.volume, pause_ms)
            )

    pos = 0
    for m in _TAG.finditer(document):
        emit_text(document[pos : m.start()])
        pos = m.end()
        if m.group(2) is None:
            continue  # comment or processing instruction
        closing, tag, raw_attrs, self_closing = (
            m.group(1),
            m.group(2).lower(),
            m.group(3),
            m.group(4),
        )
        attrs = _attrs(raw_attrs)
        if tag == "break":
            if closing:
                continue
            if "time" in attrs:
                pause = _time_ms(attrs["time"])
            else:
                strength = attrs.get("strength", "medium")
                if strength not in _BREAK_STRENGTH:
                    raise SsmlError(f"break strength {strength!r} not understood")
                pause = _BREAK_STRENGTH[strength]
            add("", stack[-1][1], pause)
            continue
        if closing:
            if len(stack) == 1 or stack[-1][0] != tag:
                expected = stack[-1][0] or "nothing"
                raise SsmlError(f"closing </{tag}> where </{expected}> was expected")
            stack.pop()
            if tag in ("p", "s"):
                add(" ", stack[-1][1])
            continue
        style = _open(tag, attrs, stack[-1][1])
        if tag == "sub" and style.alias is not None:
            add(" " + style.alias + " ", style)
        if not self_closing:
            stack.append((tag, style))
    emit_text(document[pos:])
    if len(stack) > 1:
        raise SsmlError(f"<{stack[-1][0]}> is never closed")
    out: list[Segment] = []
    for seg in segments:
        text = normalize_text(seg.text, "zh" if zh else "en")
        if text or seg.pause_ms:
            out.append(Segment(text, seg.emotion, seg.rate, seg.pitch, seg.volume, seg.pause_ms))
    return out


def is_ssml(text: str) -> bool:
    """True for a document the engines should parse rather than read aloud."""
    return text.lstrip().startswith("<speak")


def plan_clauses(
    text: str, *, emotion: str = "neutral", rate: float = 1.0, **split: int
) -> list[Segment]:
    """Plain text or SSML to one :class:`Segment` per clause (or per bare pause).

    A segment's pause stays with its last clause so silence lands where SSML put it.
    """
    out: list[Segment] = []
    for seg in parse_ssml(text, emotion=emotion, rate=rate):
        clauses = split_clauses(seg.text, **split) if seg.text else []
        for i, clause in enumerate(clauses):
            pause = seg.pause_ms if i == len(clauses) - 1 else 0.0
            out.append(Segment(clause, seg.emotion, seg.rate, seg.pitch, seg.volume, pause))
        if not clauses and seg.pause_ms:
            out.append(Segment("", seg.emotion, seg.rate, seg.pitch, seg.volume, seg.pause_ms))
    return out

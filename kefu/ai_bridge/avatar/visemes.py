"""Phonemes to visemes: the viseme set and the tables for English IPA and Mandarin.

A viseme is a class of sounds that look alike on the lips. The set follows the usual 15
lip-sync classes (silence, PP, FF, TH, DD, kk, CH, SS, nn, RR, aa, E, I, O, U) plus a
neutral half-open mouth, "@", used for schwa and for any phoneme not in the tables.

Two notations are read:

* :attr:`Notation.IPA`: what piper gives (one IPA code point per mark, stress and length
  folded in: ``ˈo``, ``ʊ``, ``iː``), and espeak-ng's IPA events, English (``ˈoʊ``, ``tʃ``,
  ``ɑːɹ``) and Mandarin (``ts.h``, ``tɕ``, ``χ``, ``ˈɑu``, ``iɛ``, ``i.``);
* :attr:`Notation.PINYIN`: pinyin initials and finals (``zh``, ``ang``, ``ü``/``v``), or
  whole syllables (``hao3``, ``xiè``), with tone digits or tone marks.

Stress marks, length marks, tone digits and letters, diacritics and modifier letters are
ignored. A phoneme with several mouth shapes (a diphthong, a compound final, an affricate
written as two letters espeak did not join) becomes several visemes, in order. Nothing here
raises on input: an unknown phoneme maps to the neutral viseme. What each viseme looks like
is in :mod:`kefu.ai_bridge.avatar.poses`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from enum import StrEnum
from functools import lru_cache

__all__ = ["Notation", "Viseme", "clean_phoneme", "phoneme_visemes"]


class Viseme(StrEnum):
    SIL = "sil"
    """Silence: the mouth at rest."""
    PP = "PP"
    """p b m: both lips closed."""
    FF = "FF"
    """f v: lower lip against the upper teeth."""
    TH = "TH"
    """θ ð: tongue tip between the teeth."""
    DD = "DD"
    """t d (and flaps): tongue on the ridge, jaw nearly closed."""
    KK = "kk"
    """k g ŋ h: tongue back; the lips take the neighbours' shape."""
    CH = "CH"
    """tʃ dʒ ʃ ʒ, Mandarin zh ch sh: lips pushed forward, teeth close."""
    SS = "SS"
    """s z ts, Mandarin z c s j q x: teeth close, lips spread."""
    NN = "nn"
    """n l: tongue up, jaw slightly open."""
    RR = "RR"
    """r ɹ ɚ, Mandarin r: lips slightly rounded."""
    AA = "aa"
    """a ɑ æ ʌ: jaw wide open."""
    E = "E"
    """e ɛ ɜ, Mandarin e: jaw half open, lips spread."""
    I = "I"  # noqa: E741 - the viseme's conventional name
    """i ɪ: jaw nearly closed, lips spread."""
    O = "O"  # noqa: E741 - the viseme's conventional name
    """o ɔ: jaw half open, lips rounded."""
    U = "U"
    """u ʊ w ü: lips rounded and pushed forward."""
    NEUTRAL = "@"
    """ə and anything unknown: a relaxed, half-open mouth."""


class Notation(StrEnum):
    IPA = "ipa"
    """IPA as piper and espeak-ng give it (espeak's Mandarin symbols included)."""
    PINYIN = "pinyin"
    """Pinyin initials, finals or syllables, tone digits or marks allowed."""


V = Viseme

# --- IPA ------------------------------------------------------------------------------------

_SILENCE_TOKENS = frozenset({"sil", "sp", "spn", "pau", "_", "^", "$", "#"})

_IPA_UNITS: Mapping[str, tuple[Viseme, ...]] = {
    # affricates written as one phoneme (espeak-ng joins them, piper does not)
    "tʃ": (V.CH,),
    "dʒ": (V.CH,),
    "ʈʂ": (V.CH,),
    "ɖʐ": (V.CH,),
    "ts": (V.SS,),
    "dz": (V.SS,),
    "tɕ": (V.SS,),
    "dʑ": (V.SS,),
    # espeak-ng cmn: retroflex written with a dot, aspiration with a plain h
    "ts.h": (V.CH,),
    "ts.": (V.CH,),
    "s.": (V.CH,),
    "z.": (V.RR,),
    "i.": (V.NEUTRAL,),
    "tsh": (V.SS,),
    "tɕh": (V.SS,),
    "ph": (V.PP,),
    "th": (V.DD,),
    "kh": (V.KK,),
    # the velar nasal spelt with two letters (espeak-ng cmn: "onɡ")
    "nɡ": (V.KK,),
    "ng": (V.KK,),
}
_MAX_UNIT = max(len(unit) for unit in _IPA_UNITS)


def _chars(visemes: Mapping[Viseme, str]) -> dict[str, Viseme]:
    return {char: viseme for viseme, chars in visemes.items() for char in chars}


_IPA_CHARS: Mapping[str, Viseme] = _chars(
    {
        V.PP: "pbmɓʙʘ",
        V.FF: "fvɱʋⱱɸβ",
        V.TH: "θð",
        V.DD: "tdɾʈɖɗɽɺ",
        V.KK: "kgɡŋxɣqɢʔhɦχʁħʕcɟçɰɠʛʜʡʢɴ",
        V.CH: "ʃʒʂɧ",
        V.SS: "szɕʑ",
        V.NN: "nlɫɲɳɭʎʟɬɮ",
        V.RR: "rɹɻʀɚɝʐ",
        V.AA: "aɑæɒäʌɶ",
        V.E: "eɛɜɘɤ",
        V.I: "iɪɨᵻɯj",
        V.O: "oɔɵøœɞ",
        V.U: "uʊyʉʏwʍɥ",
        V.NEUTRAL: "əɐ",
    }
)

# --- pinyin ---------------------------------------------------------------------------------

_PINYIN_INITIALS: Mapping[str, Viseme] = {
    **dict.fromkeys(("b", "p", "m"), V.PP),
    "f": V.FF,
    **dict.fromkeys(("d", "t"), V.DD),
    **dict.fromkeys(("n", "l"), V.NN),
    **dict.fromkeys(("g", "k", "h", "ng"), V.KK),
    **dict.fromkeys(("j", "q", "x", "z", "c", "s"), V.SS),
    **dict.fromkeys(("zh", "ch", "sh"), V.CH),
    "r": V.RR,
    "y": V.I,
    "w": V.U,
}

# ``v`` is ü. Compound finals are broken into the vowels (and nasal coda) they are made of.
_PINYIN_FINALS: Mapping[str, tuple[Viseme, ...]] = {
    "a": (V.AA,),
    "o": (V.O,),
    "e": (V.E,),
    "i": (V.I,),
    "u": (V.U,),
    "v": (V.U,),
    "ai": (V.AA, V.I),
    "ei": (V.E, V.I),
    "ao": (V.AA, V.U),
    "ou": (V.O, V.U),
    "an": (V.AA, V.NN),
    "en": (V.NEUTRAL, V.NN),
    "ang": (V.AA, V.KK),
    "eng": (V.NEUTRAL, V.KK),
    "ong": (V.U, V.KK),
    "er": (V.NEUTRAL, V.RR),
    "ia": (V.I, V.AA),
    "ie": (V.I, V.E),
    "iao": (V.I, V.AA, V.U),
    "iou": (V.I, V.O, V.U),
    "ian": (V.I, V.E, V.NN),
    "in": (V.I, V.NN),
    "iang": (V.I, V.AA, V.KK),
    "ing": (V.I, V.KK),
    "iong": (V.I, V.U, V.KK),
    "ua": (V.U, V.AA),
    "uo": (V.U, V.O),
    "uai": (V.U, V.AA, V.I),
    "uei": (V.U, V.E, V.I),
    "uan": (V.U, V.AA, V.NN),
    "uen": (V.U, V.NEUTRAL, V.NN),
    "uang": (V.U, V.AA, V.KK),
    "ueng": (V.U, V.NEUTRAL, V.KK),
    "ve": (V.U, V.E),
    "van": (V.U, V.E, V.NN),
    "vn": (V.U, V.NN),
}
_ABBREVIATED_FINALS = {"iu": "iou", "ui": "uei", "un": "uen"}
_Y_SYLLABLES = {"yi": "i", "yin": "in", "ying": "ing", "you": "iou"}

# --- cleaning -------------------------------------------------------------------------------

_TONE_LETTERS = frozenset("˥˦˧˨˩")


def clean_phoneme(phoneme: str, notation: Notation = Notation.IPA) -> str:
    """``phoneme`` without stress, length, tone digits or letters, diacritics, modifier
    letters (aspiration ʰ, palatalisation ʲ, rhotic hook ˞) and symbols (intonation arrows);
    ASCII lowered; in pinyin ü (or ``u:``) spelt ``v``. espeak's retroflex dot (``ts.``,
    ``i.``) is kept."""
    text = unicodedata.normalize("NFD", phoneme.strip())
    if notation is Notation.PINYIN:
        text = text.replace("u\u0308", "v").replace("U\u0308", "v").replace("u:", "v")
    kept = []
    for char in text:
        if char.isdigit() or char in _TONE_LETTERS:
            continue
        category = unicodedata.category(char)
        if category in ("Mn", "Lm") or category[0] == "S":
            continue
        kept.append(char.lower() if char.isascii() else char)
    return "".join(kept)


def _is_silence(phoneme: str) -> bool:
    token = phoneme.strip()
    if not token or token.lower() in _SILENCE_TOKENS:
        return True
    return all(unicodedata.category(char)[0] in "PZ" for char in token)


def _dedupe(visemes: list[Viseme]) -> tuple[Viseme, ...]:
    out: list[Viseme] = []
    for viseme in visemes:
        if not out or out[-1] is not viseme:
            out.append(viseme)
    return tuple(out)


def _ipa_visemes(token: str) -> tuple[Viseme, ...]:
    """Greedy longest match over the IPA tables; characters not in them are skipped when
    something else was recognised, else the whole token is the neutral viseme."""
    found: list[Viseme] = []
    i = 0
    while i < len(token):
        for length in range(min(_MAX_UNIT, len(token) - i), 1, -1):
            unit = _IPA_UNITS.get(token[i : i + length])
            if unit is not None:
                found.extend(unit)
                i += length
                break
        else:
            viseme = _IPA_CHARS.get(token[i])
            if viseme is not None:
                found.append(viseme)
            i += 1
    return _dedupe(found) if found else (V.NEUTRAL,)


def _pinyin_final(initial: str, final: str) -> tuple[Viseme, ...] | None:
    if initial in ("j", "q", "x") and final.startswith("u"):
        final = "v" + final[1:]  # ju, que, xuan, jun are written without the dots
    final = _ABBREVIATED_FINALS.get(final, final)
    if final in _PINYIN_FINALS:
        return _PINYIN_FINALS[final]
    if final.endswith("r") and final[:-1] in _PINYIN_FINALS:  # erhua: huar, dianr
        return (*_PINYIN_FINALS[final[:-1]], V.RR)
    return None


def _pinyin_visemes(token: str) -> tuple[Viseme, ...]:
    if token in _PINYIN_INITIALS:
        return (_PINYIN_INITIALS[token],)
    if token in _PINYIN_FINALS:
        return _PINYIN_FINALS[token]
    # A whole syllable: respell y/w syllables as their finals, then split off the initial.
    if token in _Y_SYLLABLES:
        token = _Y_SYLLABLES[token]
    elif token.startswith("yu") or token.startswith("yv"):
        token = "v" + token[2:]
    elif token.startswith("y"):
        token = "i" + token[1:]
    elif token == "wu":
        token = "u"
    elif token.startswith("w"):
        token = "u" + token[1:]
    for size in (2, 1):
        initial, final = token[:size], token[size:]
        if initial in _PINYIN_INITIALS and final:
            parts = _pinyin_final(initial, final)
            if parts is not None:
                return _dedupe([_PINYIN_INITIALS[initial], *parts])
    parts = _pinyin_final("", token)
    return parts if parts is not None else _ipa_visemes(token)


@lru_cache(maxsize=4096)
def phoneme_visemes(phoneme: str, notation: Notation = Notation.IPA) -> tuple[Viseme, ...]:
    """The visemes of one phoneme, in order; ``()`` for a pure prosody mark (a stress or tone
    mark sent on its own), ``(SIL,)`` for silence, pauses and punctuation. Never raises."""
    if _is_silence(phoneme):
        return (V.SIL,)
    token = clean_phoneme(phoneme, notation)
    if not token:
        return ()
    if notation is Notation.PINYIN:
        return _pinyin_visemes(token)
    return _ipa_visemes(token)

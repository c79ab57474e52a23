"""The hesitation set's audio: each item as a caller says it (:mod:`loadtest.hesitation`).

English items are spoken by piper's joe voice, Mandarin ones by the Kokoro voice that is not
kefu's (:mod:`loadtest.mandarin_voice`, its male and female speakers by turns). Segments are
cached per text (:mod:`loadtest.voice_cache`: reruns hear the same audio), trimmed to their
voice and joined by the item's pauses over -60 dBFS noise, 0.3 s before, 1.5 s after (and
up to 5 s more, for a turn still open).
"""

from __future__ import annotations

import functools
import json
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from loadtest.voice_cache import cached_audio

SR = 16000
LEAD_S, TAIL_S, OVERTIME_S = 0.3, 1.5, 5.0
NOISE_DBFS = -60.0
TRIM_DB = 45.0  # a segment's voice: its 10 ms frames within this of the loudest one
SPEEDS = (1.0, 0.9, 1.1)  # by item: slow and hurried callers both occur
_CACHE_VERSION = 1


class Spoken(Protocol):
    id: str
    segments: tuple[str, ...]
    pauses_ms: tuple[int, ...]


@functools.cache
def _piper() -> Any:
    """Piper's en_US joe voice, loaded at the first text that is not cached yet."""
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


def spoken(text: str, length_scale: float = 1.0) -> NDArray[np.int16]:
    """Piper's 16 kHz audio of ``text``: its own noise draw, cached, so the same every run."""
    from kefu.ai_bridge.listen.heldout import speak

    key = json.dumps([_CACHE_VERSION, "joe-us", text, length_scale])
    return cached_audio("hesitation", key, lambda: speak(_piper(), text, length_scale=length_scale))


def spoken_zh(text: str, seed: int) -> NDArray[np.int16]:
    """The Kokoro Mandarin voice's 16 kHz audio of ``text`` (speaker and speed by ``seed``)."""
    from loadtest.mandarin_voice import SPEAKERS, speak_zh

    speaker = SPEAKERS[seed // len(SPEEDS) % len(SPEAKERS)]
    return speak_zh(text, speaker, speed=1.0 / SPEEDS[seed % len(SPEEDS)])


def trim(pcm: NDArray[np.int16]) -> NDArray[np.int16]:
    """``pcm`` cut to its voice: the 10 ms frames within :data:`TRIM_DB` of the loudest."""
    n = len(pcm) // 160
    rms = np.sqrt(np.mean(pcm[: n * 160].astype(np.float64).reshape(n, 160) ** 2, axis=1))
    loud = np.flatnonzero(rms >= max(rms.max(initial=0.0) * 10 ** (-TRIM_DB / 20), 30.0))
    return pcm[int(loud[0]) * 160 : (int(loud[-1]) + 1) * 160] if loud.size else pcm


@dataclass(frozen=True, slots=True)
class Stimulus:
    audio: NDArray[np.int16]
    spans: tuple[tuple[float, float], ...]
    """Each segment's voice (start, end), in seconds of the audio."""
    tail_end: int
    """Sample where the trailing silence ends; noise follows while a turn is still open."""


def stimulus(item: Spoken, lang: str = "en") -> Stimulus:
    """The item as a caller says it: segments, pauses, lead and tail, over faint noise."""
    seed = zlib.crc32(item.id.encode())
    scale = SPEEDS[seed % len(SPEEDS)]
    parts = [np.zeros(int(LEAD_S * SR), np.int16)]
    spans = []
    at = len(parts[0])
    for i, text in enumerate(item.segments):
        if i:
            parts.append(np.zeros(int(item.pauses_ms[i - 1] * SR / 1000), np.int16))
            at += len(parts[-1])
        voice = spoken_zh(text, seed) if lang == "zh" else spoken(text, scale)
        parts.append(trim(voice))
        spans.append((at / SR, (at + len(parts[-1])) / SR))
        at += len(parts[-1])
    parts.append(np.zeros(int((TAIL_S + OVERTIME_S) * SR), np.int16))
    audio = np.concatenate(parts).astype(np.float64)
    audio += np.random.default_rng(seed).normal(0.0, 32768 * 10 ** (NOISE_DBFS / 20), len(audio))
    pcm = np.clip(np.round(audio), -32768, 32767).astype(np.int16)
    return Stimulus(pcm, tuple(spans), at + int(TAIL_S * SR))

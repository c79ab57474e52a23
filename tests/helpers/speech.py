"""Transcribing what a test's listener heard, utterance by utterance.

A recording of a call is mostly silence with a few utterances in it. Whisper stops at the
first long silence of a window and, after several seconds of it, sometimes returns a stray
word for the whole recording ("and"), so tests transcribe each voiced stretch on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadtest.voice import VOICED_RMS

__all__ = ["heard_text", "utterances"]


def utterances(pcm: np.ndarray, rate: int, *, pause_s: float = 0.6) -> list[np.ndarray]:
    """The voiced stretches of ``pcm`` (20 ms frames at or above ``VOICED_RMS``), split at
    pauses of ``pause_s`` or more."""
    frame = rate // 50
    n = len(pcm) // frame
    if n == 0:
        return []
    rms = np.sqrt(np.mean(pcm[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1))
    voiced = np.flatnonzero(rms >= VOICED_RMS)
    if voiced.size == 0:
        return []
    gap = int(pause_s * 50)
    breaks = np.flatnonzero(np.diff(voiced) > gap)
    starts = np.concatenate(([voiced[0]], voiced[breaks + 1]))
    ends = np.concatenate((voiced[breaks], [voiced[-1]])) + 1
    return [pcm[a * frame : b * frame] for a, b in zip(starts, ends, strict=True)]


def heard_text(asr: Any, pcm: np.ndarray, rate: int) -> str:
    """Whisper's transcript of everything voiced in ``pcm``: lower case, words only."""
    import soxr

    said = []
    for piece in utterances(pcm, rate):
        pcm16k = piece if rate == 16000 else soxr.resample(piece, rate, 16000).astype(np.int16)
        said.append(asr.transcribe_sync(pcm16k).text.lower())
    text = " ".join(said)
    return " ".join("".join(c if c.isalnum() else " " for c in text).split())

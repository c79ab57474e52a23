"""Transcribing what a test's listener heard, utterance by utterance.

A recording of a call is mostly silence with a few utterances in it. Whisper stops at the
first long silence of a window and, after several seconds of it, sometimes returns a stray
word for the whole recording ("and"), so tests transcribe each voiced stretch on its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadtest.voice_report import utterances

__all__ = ["heard_text", "utterances"]


def heard_text(asr: Any, pcm: np.ndarray, rate: int) -> str:
    """Whisper's transcript of everything voiced in ``pcm``: lower case, words only."""
    import soxr

    said = []
    for piece in utterances(pcm, rate):
        pcm16k = piece if rate == 16000 else soxr.resample(piece, rate, 16000).astype(np.int16)
        said.append(asr.transcribe_sync(pcm16k).text.lower())
    text = " ".join(said)
    return " ".join("".join(c if c.isalnum() else " " for c in text).split())

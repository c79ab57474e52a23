"""Frames for ``python -m loadtest takeover``: every side of a takeover (what the SIP caller
sent and received, what the agent's WebRTC client received) comes down to one (arrival, RMS)
pair per 20 ms of audio, lined up against the others by the modules that measure."""

from __future__ import annotations

import numpy as np

from loadtest.voice import VOICED_RMS

Frame = tuple[float, float]
"""(arrival, UNIX seconds; RMS of the decoded 20 ms frame)."""
MAX_LAG_S = 1.0
"""The longest delay tried when lining two frame lists up (agent → caller, caller → agent)."""


def rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) if pcm.size else 0.0


def voiced_flags(pcm: np.ndarray, frame: int, threshold: float = VOICED_RMS) -> list[bool]:
    """Per ``frame``-sample frame of ``pcm`` (the last one zero-padded): RMS ≥ threshold."""
    n = -(-len(pcm) // frame)
    padded = np.zeros(n * frame, np.float64)
    padded[: len(pcm)] = pcm
    levels = np.sqrt((padded.reshape(n, frame) ** 2).mean(axis=1)) if n else np.zeros(0)
    return [bool(x >= threshold) for x in levels]

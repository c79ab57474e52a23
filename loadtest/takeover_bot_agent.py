"""The kefu → caller audio around a takeover, told apart: which voiced frames the SIP caller
received were the bot's and which the agent's (by content: lined up with the agent's WAV), the
bot's last audible frame, and whether the bot audio after the click replays what the caller had
already heard. What the numbers mean in a record: :mod:`loadtest.takeover_record`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadtest.takeover_frames import MAX_LAG_S, Frame
from loadtest.voice import FRAME_S, SIP_RATE, VOICED_RMS

AUDIBLE_RMS = 30.0
"""A kefu -> caller frame above this RMS (about -61 dBFS) is not digital silence: the bot's
last audible frame (the codec's fade-out included) is reported next to its last voiced one."""
REPEAT_SIMILARITY = 0.8
"""Correlation above which the bot audio after the click replays what was heard before."""
ALIGN_TOL_FRAMES = 2
FOREIGN_TOL_FRAMES = 5


@dataclass(frozen=True, slots=True)
class Split:
    """The caller's received voiced frames around a takeover, told apart (bot / agent)."""

    bot: list[float]
    """Arrivals of the bot's voiced frames (the answer's start up to the first agent frame)."""
    agent: list[float]
    """Arrivals of the voiced frames that line up with the agent's WAV."""
    foreign: list[float]
    """Voiced frames after the first agent frame that do not line up with the WAV."""
    delay_s: float | None
    """Agent microphone → caller delay that lines the most frames up (None: no agent voice)."""

    @property
    def last_bot(self) -> float | None:
        return max(self.bot) if self.bot else None

    @property
    def first_agent(self) -> float | None:
        return min(self.agent) if self.agent else None


def split_bot_agent(
    received: Sequence[Frame],
    *,
    answer_start: float,
    mic_first_frame: float,
    wav_voiced: Sequence[bool],
    until: float,
    frame_s: float = FRAME_S,
    max_delay_s: float = MAX_LAG_S,
    tol_frames: int = ALIGN_TOL_FRAMES,
    foreign_tol_frames: int = FOREIGN_TOL_FRAMES,
    threshold: float = VOICED_RMS,
) -> Split:
    """Which voiced frames the caller received between ``answer_start`` and ``until`` were
    the bot's and which the agent's.

    The agent's WAV frame ``j`` left its microphone at ``mic_first_frame + j * frame_s``.
    Every delay from 0 to ``max_delay_s`` (5 ms steps) is tried: the one under which most
    received voiced frames (from the WAV's first voiced frame on) fall on a voiced WAV frame
    is the agent's path delay (ties: the shortest). Under it, a received voiced frame is the
    agent's when a WAV frame within ``tol_frames`` of it is voiced. Voiced frames before the
    first agent frame are the bot's; later ones with no voiced WAV frame within
    ``foreign_tol_frames`` are ``foreign`` (the wider margin allows for the agent's audio
    drifting by a few frames on its way: rebuffering, a sender that skips frames).
    """
    voiced = sorted(at for at, level in received if level >= threshold and at >= answer_start)
    voiced = [at for at in voiced if at < until]
    onset_index = next((j for j, v in enumerate(wav_voiced) if v), None)
    if onset_index is None:
        return Split(voiced, [], [], None)
    onset = mic_first_frame + onset_index * frame_s
    after = [at for at in voiced if at >= onset]
    n = len(wav_voiced)

    def index(at: float, delay: float) -> int:
        return int(np.floor((at - delay - mic_first_frame) / frame_s + 1e-9))

    best, best_score = None, 0
    for step in range(int(round(max_delay_s / 0.005)) + 1):
        delay = step * 0.005
        score = 0
        for at in after:
            j = index(at, delay)
            score += 0 <= j < n and wav_voiced[j]
        if score > best_score:
            best, best_score = delay, score
    if best is None:
        return Split(voiced, [], [], None)

    def lines_up(at: float, tol: int) -> bool:
        j = index(at, best)
        lo, hi = max(0, j - tol), min(n, j + tol + 1)
        return any(wav_voiced[lo:hi])

    agent = [at for at in after if lines_up(at, tol_frames)]
    first = min(agent) if agent else until
    bot = [at for at in voiced if at < first]
    foreign = [at for at in voiced if at > first and not lines_up(at, foreign_tol_frames)]
    return Split(bot, agent, foreign, best)


def last_audible(
    received: Sequence[Frame], start: float, until: float, threshold: float = AUDIBLE_RMS
) -> float | None:
    """Arrival of the last frame in [start, until) louder than digital silence."""
    found = [at for at, level in received if start <= at < until and level >= threshold]
    return max(found) if found else None


def find_repeat(
    pcm: np.ndarray, start: int, length: int, *, search: int, min_gap: int = 80
) -> tuple[float, int] | None:
    """Whether ``pcm[start:start + length]`` repeats audio that played shortly before it:
    the best normalised correlation with any stretch starting in the ``search`` samples
    before it (and at least ``min_gap`` samples earlier), and how many samples earlier that
    stretch started. None for a silent or too short segment."""
    seg = pcm[start : start + length].astype(np.float64)
    lo = max(0, start - search)
    hi = start - min_gap  # last candidate start
    norm = float(np.linalg.norm(seg))
    if len(seg) < min_gap or norm == 0 or hi < lo:
        return None
    window = pcm[lo : hi + length].astype(np.float64)
    dots = np.correlate(window, seg, mode="valid")
    energy = np.concatenate(([0.0], np.cumsum(window**2)))
    norms = np.sqrt(energy[length:] - energy[:-length])
    scores = dots / (norms * norm + 1e-9)
    best = int(np.argmax(scores))
    return float(scores[best]), start - (lo + best)


def repeat_after(
    back_audio: Sequence[tuple[float, np.ndarray]], click: float, last_bot: float | None
) -> dict[str, Any] | None:
    """The bot's audio the caller got after the click (up to its last voiced packet): is it
    a replay of what the caller had already heard in the second before? ``similarity`` ≥ 0.8
    says it is (``earlier_ms``: how much earlier it had played)."""
    if last_bot is None or last_bot < click:
        return None
    after = [i for i, (at, _) in enumerate(back_audio) if click <= at <= last_bot]
    if len(after) < 2:
        return None
    pcm = np.concatenate([chunk for _, chunk in back_audio])
    offsets = np.cumsum([0] + [len(chunk) for _, chunk in back_audio])
    start, end = int(offsets[after[0]]), int(offsets[after[-1] + 1])
    found = find_repeat(pcm, start, end - start, search=SIP_RATE)
    if found is None:
        return None
    score, earlier = found
    return {"similarity": round(score, 3), "earlier_ms": round(earlier * 1000 / SIP_RATE, 1)}

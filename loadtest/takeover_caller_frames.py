"""The caller's frames at the agent: which of the caller's voiced 20 ms frames the agent's
WebRTC client heard. The agent's track of the caller is the received track that lines up best
with what the caller sent; the caller → agent delay is found on the frames' envelope, then
refined to the one that matches the most frames; each received frame matches one sent frame at
most. What the numbers mean in a record: :mod:`loadtest.takeover_record`."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadtest.takeover_frames import MAX_LAG_S, Frame
from loadtest.voice import VOICED_RMS

HEARD_RMS = VOICED_RMS / 2
"""A frame the agent received counts as carrying the caller's voice above this RMS (Opus
smears the edges of words)."""
MATCH_TOL_S = 0.04


def estimate_lag(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    max_lag_s: float = MAX_LAG_S,
    bin_s: float = 0.01,
    sent_threshold: float = VOICED_RMS,
    heard_threshold: float = HEARD_RMS,
) -> tuple[float | None, int]:
    """The delay (0 … ``max_lag_s``) from ``sent`` to ``heard`` under which their voiced
    frames line up best, on a ``bin_s`` grid (a heard frame counts in its bin and both
    neighbours, against jitter), and the score: the number of sent voiced frames that line up.
    The middle of the best plateau; None (0) when nothing lines up."""
    s = [at for at, level in sent if level >= sent_threshold]
    h = [at for at, level in heard if level >= heard_threshold]
    if not s or not h:
        return None, 0
    t0 = min(min(s), min(h))
    heard_bins: set[int] = set()
    for at in h:
        b = int(round((at - t0) / bin_s))
        heard_bins.update((b - 1, b, b + 1))
    sent_bins = [int(round((at - t0) / bin_s)) for at in s]
    scores = [
        sum((b + lag) in heard_bins for b in sent_bins)
        for lag in range(int(round(max_lag_s / bin_s)) + 1)
    ]
    top = max(scores)
    if top == 0:
        return None, 0
    plateau = [lag for lag, score in enumerate(scores) if score == top]
    # the first run of the best score
    run = [plateau[0]]
    for lag in plateau[1:]:
        if lag != run[-1] + 1:
            break
        run.append(lag)
    return run[len(run) // 2] * bin_s, top


@dataclass(frozen=True, slots=True)
class FrameMatch:
    sent_voiced: int
    heard: int
    missing: list[float] = field(default_factory=list)
    """Arrivals at kefu of the sent voiced frames the agent did not hear."""

    @property
    def lost(self) -> int:
        return self.sent_voiced - self.heard


def match_frames(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    lag_s: float,
    window: tuple[float, float],
    tol_s: float = MATCH_TOL_S,
    sent_threshold: float = VOICED_RMS,
    heard_threshold: float = HEARD_RMS,
) -> FrameMatch:
    """The sent voiced frames that arrived within ``window`` and how many of them were heard:
    a heard frame (RMS ≥ ``heard_threshold``) within ``tol_s`` of arrival + ``lag_s``, the
    nearest unused one, each heard frame used once. Matched in two passes, 10 ms first, so a
    missing frame's neighbours are not taken from the frames they belong to."""
    a, b = window
    s = sorted(at for at, level in sent if level >= sent_threshold and a <= at < b)
    h = sorted(at for at, level in heard if level >= heard_threshold)
    used = [False] * len(h)
    matched = [False] * len(s)
    for tol in sorted({min(0.01, tol_s), tol_s}):
        for i, at in enumerate(s):
            if matched[i]:
                continue
            want = at + lag_s
            k = bisect.bisect_left(h, want - tol)
            best = None
            while k < len(h) and h[k] <= want + tol:
                if not used[k] and (best is None or abs(h[k] - want) < abs(h[best] - want)):
                    best = k
                k += 1
            if best is not None:
                used[best] = matched[i] = True
    missing = [at for at, ok in zip(s, matched, strict=True) if not ok]
    return FrameMatch(len(s), sum(matched), missing)


def best_match(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    lag_s: float,
    window: tuple[float, float],
    search_s: float = 0.02,
    step_s: float = 0.002,
) -> tuple[float, FrameMatch]:
    """:func:`match_frames` under the delay within ``search_s`` of ``lag_s`` (``step_s``
    apart) that matches the most frames (ties: the nearest to ``lag_s``). The envelope's
    delay is good to a bin; the agent's 20 ms frames do not start where the caller's packets
    do, and half a frame off would miss a word's first frame and leave its smeared last one
    unused."""
    steps = int(round(search_s / step_s))
    candidates = sorted(
        (lag_s + k * step_s for k in range(-steps, steps + 1)), key=lambda x: abs(x - lag_s)
    )
    best_lag, best = lag_s, match_frames(sent, heard, lag_s=lag_s, window=window)
    for lag in candidates:
        m = match_frames(sent, heard, lag_s=lag, window=window)
        if m.heard > best.heard:
            best_lag, best = lag, m
    return best_lag, best


def pick_track(
    sent: Sequence[Frame], tracks: Sequence[Sequence[Frame]]
) -> tuple[int | None, float | None]:
    """The received track that carries the caller (its voiced frames line up best with what
    the caller sent) and its delay; (None, None) when none does."""
    best: tuple[int | None, float | None, int] = (None, None, 0)
    for i, frames in enumerate(tracks):
        lag, score = estimate_lag(sent, frames)
        if lag is not None and score > best[2]:
            best = (i, lag, score)
    return best[0], best[1]

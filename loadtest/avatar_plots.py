"""A lip-sync timeline of one call, as a picture: what the caller heard against the mouth.

``python -m loadtest avatar-sync HEARD.wav W.jsonl --plot OUT.png [--video V.y4m]`` draws, on
the receiver's clock, the envelope of the voice heard (from ``HEARD.wav`` placed by
``HEARD.wav.times``), ``jawOpen`` of the weights frames as they arrived and, with ``--video``,
the mouth read from the received pictures (:func:`loadtest.avatar_sync.video_mouth`), each
scaled to its own peak, with the offsets measured printed in the legend. matplotlib is a
test/benchmark dependency; without it nothing is drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_timeline"]


def plot_timeline(
    out: Path,
    audio: np.ndarray,
    rate: int,
    audio_t0: float,
    curves: list[tuple[str, np.ndarray, np.ndarray]],
) -> Path | None:
    """``curves``: (label, arrival times, values) per mouth signal; returns the PNG or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    hop = rate // 100
    frames = len(audio) // hop
    env = np.sqrt(np.mean(audio[: frames * hop].astype(np.float64).reshape(frames, hop) ** 2, 1))
    t_audio = audio_t0 + np.arange(frames) / 100.0
    origin = min([audio_t0] + [float(times[0]) for _, times, _ in curves if len(times)])
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.fill_between(
        t_audio - origin, env / max(env.max(), 1.0), color="#bbbbbb", label="voice heard (RMS)"
    )
    for (label, times, values), color in zip(curves, ("#e15759", "#4e79a7"), strict=False):
        span = float(np.ptp(values)) or 1.0
        ax.plot(times - origin, (values - values.min()) / span, color=color, lw=1.4, label=label)
    ax.set_xlabel("seconds (arrival at the caller)")
    ax.set_yticks([])
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("Lip-sync on the receiving side: the mouth against the voice")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

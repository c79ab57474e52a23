"""Pictures of a ``python -m loadtest voice`` run, written next to its JSON report.

* ``<report>.latency.png``: the distribution of the caller-heard response time (caller's last
  word -> kefu's first audio on the wire) over the clean turns, as a histogram and its
  cumulative curve, with p50 and p95 marked;
* ``<report>.waterfall.png`` (when ``--interaction-log`` matched kefu's traces to the turns):
  one bar per turn, split into kefu's stages (end-of-turn wait, ASR, dialog, TTS, playout),
  sorted by response time: where each turn's time went.

matplotlib is a test/benchmark dependency; without it the report is written and the pictures
are skipped with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["write_plots"]

STAGES = ("endpoint", "asr", "dialog", "tts", "playout")
COLORS = ("#9aa5b1", "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1")


def write_plots(summary: dict[str, Any], report: Path) -> list[Path]:
    """Write the pictures for ``summary`` beside ``report``; returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    turns = summary.get("turn_records") or []
    title = f"{summary.get('transport', '?')}, {summary.get('concurrency', 1)} call(s) at once"
    written = []
    clean = [
        float(t["latency_ms"])
        for t in turns
        if t.get("latency_ms") is not None and not t.get("overlapped")
    ]
    if clean:
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        ax.hist(clean, bins=min(30, max(5, len(clean) // 2)), color="#4e79a7", alpha=0.8)
        ax.set_xlabel("caller's last word -> first audio from kefu (ms)")
        ax.set_ylabel("turns")
        cdf = ax.twinx()
        xs = sorted(clean)
        cdf.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], color="#e15759")
        cdf.set_ylim(0, 1.02)
        cdf.set_ylabel("share of turns at or below")
        marked = False
        for q, style in ((50, "--"), (95, ":")):
            value = summary.get(f"p{q}_ms")
            if value is not None:
                ax.axvline(value, color="black", linestyle=style, label=f"p{q} {value:.0f} ms")
                marked = True
        if marked:
            ax.legend(loc="upper left")
        ax.set_title(f"Voice response time, {len(clean)} turns ({title})")
        fig.tight_layout()
        path = report.with_suffix(".latency.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    traced = [t for t in turns if (t.get("trace") or {}).get("stages_ms")]
    if traced:
        traced.sort(key=lambda t: t["trace"]["stages_ms"].get("response") or 0.0)
        fig, ax = plt.subplots(figsize=(7, max(3.0, 0.22 * len(traced) + 1.2)), dpi=110)
        for i, turn in enumerate(traced):
            stages = turn["trace"]["stages_ms"]
            left = 0.0
            for stage, color in zip(STAGES, COLORS, strict=True):
                width = max(0.0, float(stages.get(stage) or 0.0))
                ax.barh(i, width, left=left, color=color, label=stage if i == 0 else None)
                left += width
        ax.set_yticks(range(len(traced)))
        ax.set_yticklabels([t["question"] for t in traced], fontsize=7)
        ax.set_xlabel("ms after the caller's last word (kefu's clock)")
        ax.legend(loc="lower right", fontsize=8)
        ax.set_title(f"Where each turn's time went ({title})")
        fig.tight_layout()
        path = report.with_suffix(".waterfall.png")
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written

"""The picture of a failover run (``python -m loadtest.cluster_failover --plot FILE``).

One dot per call: when its INVITE left (seconds from the node's SIGKILL) against how long it
took to be answered (log scale), coloured by the node that answered it, crosses for calls that
failed; vertical lines mark the kill and the moment Kamailio marked the node inactive. Calls
that waited on the dead node sit high (about Kamailio's FR_TIMER) just after the kill.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_failover"]


def plot_failover(
    trace: dict[str, Any],
    killed_at: float,
    victim: str,
    survivor: str,
    inactive_s: float | None,
    path: Path,
) -> Path | None:
    """Write the timeline to ``path``; None (and nothing written) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups: dict[str, tuple[list[float], list[float]]] = {
        "answered by the killed node": ([], []),
        "answered by the survivor": ([], []),
        "failed": ([], []),
    }
    for call in trace.values():
        x = call.invite_at - killed_at
        ok = call.answered_at is not None and call.bye_ok
        if not ok:
            setup = (call.answered_at or call.invite_at + 0.001) - call.invite_at
            groups["failed"][0].append(x)
            groups["failed"][1].append(max(setup, 0.001) * 1000)
            continue
        key = "answered by the killed node" if call.node == victim else "answered by the survivor"
        groups[key][0].append(x)
        groups[key][1].append((call.answered_at - call.invite_at) * 1000)
    fig, ax = plt.subplots(figsize=(9, 4.2), dpi=110)
    styles = {
        "answered by the killed node": dict(color="#e15759", marker="o", s=14),
        "answered by the survivor": dict(color="#4e79a7", marker="o", s=14),
        "failed": dict(color="black", marker="x", s=30),
    }
    for label, (xs, ys) in groups.items():
        if xs:
            ax.scatter(xs, ys, label=f"{label} ({len(xs)})", **styles[label])  # type: ignore[arg-type]
    ax.axvline(0.0, color="#e15759", linestyle="--", linewidth=1)
    ax.text(0.05, 0.97, "SIGKILL", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    if inactive_s is not None:
        ax.axvline(inactive_s, color="#59a14f", linestyle=":", linewidth=1.2)
        ax.text(
            inactive_s + 0.05, 0.88, "Kamailio: node inactive",
            transform=ax.get_xaxis_transform(), va="top", fontsize=8,
        )  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("INVITE sent, seconds from the kill")
    ax.set_ylabel("INVITE → 200 OK (ms, log)")
    ax.set_title(f"kill -9 of one of two kefu nodes behind Kamailio ({survivor} survives)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

"""The report of ``python -m loadtest takeover``: percentiles and totals over every takeover
record and round, and the benchmark table's row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadtest.takeover_bot_agent import REPEAT_SIMILARITY

HEADER = (
    "| K agents × rounds | takeovers ok | click → last bot packet p50 / p95 / max ms | "
    "click → agent audio p50 / p95 / max ms | takeover API p50 / p95 / max ms | "
    "next answer p50 / p95 / max ms | caller frames lost (agent) | ≤ 100 ms | "
    "kefu CPU % (all held) | load |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def stats(values: Sequence[float | None]) -> dict[str, Any]:
    """p50 / p95 / max of the values that exist, and how many there were."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"p50": None, "p95": None, "max": None, "n": 0}
    return {
        "p50": round(float(np.percentile(xs, 50)), 1),
        "p95": round(float(np.percentile(xs, 95)), 1),
        "max": round(max(xs), 1),
        "n": len(xs),
    }


def summarize(
    records: Sequence[dict[str, Any]], rounds: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The percentiles and totals over every takeover (``records``) and round."""
    measured = [r for r in records if r.get("bot_stop_ms") is not None]
    out: dict[str, Any] = {
        "takeovers": len(records),
        "ok": sum(bool(r.get("ok")) for r in records),
        "measured": len(measured),
        "meets_100ms": sum(bool(r.get("meets_100ms")) for r in records),
        "all_meet_100ms": bool(records) and all(r.get("meets_100ms") for r in records),
        "bot_talking_at_click": sum(bool(r.get("bot_talking_at_click")) for r in records),
    }
    for key in (
        "bot_stop_ms",
        "bot_last_audible_ms",
        "first_agent_audio_ms",
        "agent_path_ms",
        "takeover_api_ms",
        "handback_api_ms",
        "state_human_active_after_click_ms",
        "click_into_answer_ms",
        "agent_heard_answer_ms",
        "next_answer_latency_ms",
        "handback_to_answer_ms",
    ):
        out[key] = stats([r.get(key) for r in records])
    frames = [r.get("caller_frames") or {} for r in records]
    out["caller_frames"] = {
        "wire_packets": sum(int(f.get("packets_sent") or 0) for f in frames),
        "wire_seq_lost": sum(int(f.get("lost_on_wire") or 0) for f in frames),
        "voiced_sent_in_takeover": sum(int(f.get("voiced_sent") or 0) for f in frames),
        "heard_by_agent": sum(int(f.get("heard_by_agent") or 0) for f in frames),
        "lost_to_agent": sum(int(f.get("lost") or 0) for f in frames),
        "lost_to_agent_max": max((int(f.get("lost") or 0) for f in frames), default=0),
        "agent_lag_ms": stats([f.get("lag_ms") for f in frames]),
        "kefu_rtp_lost": sum(int((f.get("kefu_rtp") or {}).get("lost") or 0) for f in frames),
        "kefu_not_received": sum(
            int((f.get("kefu_rtp") or {}).get("not_received") or 0) for f in frames
        ),
    }
    down = [r.get("downlink") or {} for r in records]
    out["downlink_skipped_frames"] = sum(int(d.get("skipped_frames") or 0) for d in down)
    out["downlink_skipped_in_takeover"] = sum(int(d.get("skipped_in_takeover") or 0) for d in down)
    out["foreign_voiced_frames"] = sum(int(r.get("foreign_voiced_frames") or 0) for r in records)
    out["bot_replayed_after_click"] = sum(
        ((r.get("bot_after_click_repeat") or {}).get("similarity") or 0) >= REPEAT_SIMILARITY
        for r in records
    )
    out["ai_spoke_before_q2"] = sum(bool(r.get("ai_spoke_before_q2")) for r in records)
    out["q2_after_handback"] = sum(bool(r.get("q2_after_handback")) for r in records)
    asr = [r.get("asr") or {} for r in records]
    out["asr_recall"] = {
        "thanks": stats([a.get("thanks_recall") for a in asr]),
        "q2": stats([a.get("q2_recall") for a in asr]),
    }
    out["kefu_cpu_pct"] = {
        "round": stats([r.get("kefu_cpu_pct") for r in rounds]),
        "all_held": stats([r.get("kefu_cpu_all_held_pct") for r in rounds]),
    }
    out["bench_cpu_pct"] = stats([r.get("bench_cpu_pct") for r in rounds])
    out["ai_only_answer_ms"] = stats([x for r in rounds for x in r.get("ai_only_answer_ms", [])])
    return out


def _triple(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "–"
    return f"{s['p50']:.0f} / {s['p95']:.0f} / {s['max']:.0f}"


def table_row(summary: dict[str, Any]) -> str:
    s = summary
    cf = s["caller_frames"]
    cpu = s["kefu_cpu_pct"]["all_held"]
    cpu_text = f"{cpu['p50']:.0f}" if cpu.get("n") else "–"
    load = s.get("load") or {}
    return (
        f"| {s.get('concurrent_agents')} × {s.get('rounds')} | {s['ok']}/{s['takeovers']} | "
        f"{_triple(s['bot_stop_ms'])} | {_triple(s['first_agent_audio_ms'])} | "
        f"{_triple(s['takeover_api_ms'])} | {_triple(s['next_answer_latency_ms'])} | "
        f"{cf['lost_to_agent']} of {cf['voiced_sent_in_takeover']} | "
        f"{s['meets_100ms']}/{s['takeovers']} | {cpu_text} | "
        f"{load.get('start', ['?'])[0]} → {load.get('end', ['?'])[0]} |"
    )

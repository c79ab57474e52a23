"""Reports of ``python -m loadtest voice``: latency per turn, stage breakdown from kefu's
interaction log, barge-in stop times on the wire, and Whisper's WER clean and over G.711."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.pcap import g711_decode, write_wav
from loadtest.voice import ASR_RATE, SIP_RATE, Heard, Question, _resample


def percentile(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def turns_of(heard: Sequence[Heard], out_dir: Path | None, asr: Any = None) -> list[dict[str, Any]]:
    """One record per placed question: latency on the wire, the reply text and WAV."""
    turns = []
    for c, h in enumerate(heard):
        placed = h.script.placed
        for k, pl in enumerate(placed):
            end = h.speech_ends[k]
            nxt = h.speech_starts[k + 1] if k + 1 < len(placed) else None
            first = h.first_voiced_after(end) if end is not None else None
            if first is not None and nxt is not None and first >= nxt:
                first = None
            rec: dict[str, Any] = {
                "call": c,
                "question": pl.question.name,
                "ref": pl.question.text,
                "ok": h.ok,
                "speech_end_mono": None if end is None else end + h.to_monotonic,
                "latency_ms": None
                if first is None or end is None
                else round((first - end) * 1000, 1),
                # The bot still talking when the question began: a barge-in, not a clean turn.
                "overlapped": bool(
                    h.speech_starts[k] is not None
                    and h.voiced_within(h.speech_starts[k] - 0.2, h.speech_starts[k])
                ),
            }
            if end is not None:
                stop = nxt if nxt is not None else end + 30.0
                reply = h.reply_between(end, stop)
                if out_dir is not None:
                    path = out_dir / f"reply-c{c:03d}-{pl.question.name}.wav"
                    write_wav(path, reply, ASR_RATE)
                    rec["reply_wav"] = path.name
                if asr is not None and reply.size:
                    rec["reply_text"] = asr.transcribe_sync(reply).text
            turns.append(rec)
    return turns


def stage_breakdown(log_path: str | Path, turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Percentiles of each TurnTrace stage over the interaction log's caller turns, and the
    trace matched to each turn: the one whose speech end (kefu's loop clock, which is this
    host's monotonic clock) is nearest after the turn's wire speech end; ``vad_lag_ms`` is
    how much later kefu marked the end than the wire showed it."""
    from kefu.ai_bridge.listen.heldout import wer

    path = Path(log_path)
    if not path.exists():
        return {}
    traces = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    traces = [t for t in traces if t.get("turn_id", 0) > 0]
    out: dict[str, Any] = {"traces": len(traces)}
    for stage in ("response", "endpoint", "asr", "dialog", "tts", "playout"):
        vals = [t["stages_ms"][stage] for t in traces if t["stages_ms"].get(stage) is not None]
        out[stage] = {"p50": percentile(vals, 50), "p95": percentile(vals, 95), "n": len(vals)}
    unused = [t for t in traces if t.get("speech_end") is not None]
    lags = []
    for rec in turns:
        wire_end = rec.get("speech_end_mono")
        if wire_end is None or not unused:
            continue
        best = min(unused, key=lambda t: abs(float(t["speech_end"]) - wire_end - 0.25))
        lag = float(best["speech_end"]) - wire_end
        if -0.3 <= lag <= 1.5:
            unused.remove(best)
            lags.append(round(lag * 1000, 1))
            rec["trace"] = {
                "vad_lag_ms": lags[-1],
                "transcript_wer": round(wer(rec["ref"], best.get("transcript", "")), 2)
                if rec["ref"]
                else None,
                "transcript": best.get("transcript"),
                "source": best.get("source"),
                "intent": best.get("intent"),
                "answer_text": best.get("answer_text"),
                "stages_ms": best.get("stages_ms"),
            }
    out["vad_lag_ms"] = {"p50": percentile(lags, 50), "p95": percentile(lags, 95), "n": len(lags)}
    return out


def summarize(turns: list[dict[str, Any]]) -> dict[str, Any]:
    clean = [t["latency_ms"] for t in turns if t["latency_ms"] is not None and not t["overlapped"]]
    return {
        "turns": len(turns),
        "answered": sum(t["latency_ms"] is not None for t in turns),
        "overlapped": sum(t["overlapped"] for t in turns),
        "p50_ms": percentile(clean, 50),
        "p95_ms": percentile(clean, 95),
        "max_ms": max(clean) if clean else None,
    }


def barge_in_report(heard: Sequence[Heard]) -> dict[str, Any]:
    """Per call: was the bot talking when the caller cut in, and how long until its audio
    fell silent on the wire (the first 0.5 s without a voiced packet)."""
    stops, rows = [], []
    for c, h in enumerate(heard):
        s2 = h.speech_starts[1] if len(h.speech_starts) > 1 else None
        row: dict[str, Any] = {"call": c, "ok": h.ok}
        if s2 is not None:
            row["bot_was_talking"] = h.voiced_within(s2 - 0.3, s2)
            stopped = h.silence_from(s2, hold_s=0.5)
            if stopped is not None and row["bot_was_talking"]:
                row["stop_ms"] = round((stopped - s2) * 1000, 1)
                stops.append(row["stop_ms"])
        rows.append(row)
    return {
        "calls": len(heard),
        "measured": len(stops),
        "stop_p50_ms": percentile(stops, 50),
        "stop_p95_ms": percentile(stops, 95),
        "stop_max_ms": max(stops) if stops else None,
        "rows": rows,
    }


def wer_report(questions: Sequence[Question], asr: Any) -> dict[str, Any]:
    """Word error rate of Whisper on the questions, clean (16 kHz) and through G.711 µ-law
    (16 -> 8 kHz, encode, decode, back to 16 kHz: what a SIP caller's audio becomes)."""
    from kefu.ai_bridge.listen.heldout import normalize, wer
    from loadtest.pcap import g711_encode

    totals = {"clean": 0.0, "g711": 0.0}
    decode_ms: list[float] = []
    words = 0
    rows = []
    for q in questions:
        if not q.text:
            continue
        narrow = _resample(q.pcm, ASR_RATE, SIP_RATE)
        phone = _resample(g711_decode(g711_encode(narrow, 0), 0), SIP_RATE, ASR_RATE)
        n = len(normalize(q.text))
        words += n
        row: dict[str, Any] = {"question": q.name, "ref": q.text}
        for kind, pcm in (("clean", q.pcm), ("g711", phone)):
            result = asr.transcribe_sync(pcm)
            decode_ms.append(result.decode_ms)
            row[kind] = result.text
            totals[kind] += wer(q.text, result.text) * n
        rows.append(row)
    return {
        "utterances": len(rows),
        "wer_clean_pct": round(100 * totals["clean"] / max(1, words), 1),
        "wer_g711_pct": round(100 * totals["g711"] / max(1, words), 1),
        "decode_p50_ms": percentile(decode_ms, 50),
        "rows": rows,
    }

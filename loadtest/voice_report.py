"""Reports of ``python -m loadtest voice``: latency per turn, stage breakdown from kefu's
interaction log, barge-in stop times on the wire, and Whisper's WER clean and over G.711.

Replies are transcribed with the English Whisper (``--lang en``, the whole reply at once) or,
for Mandarin callers (``--lang zh``), with kefu's multilingual Whisper forced to Mandarin
(Simplified), utterance by utterance (:class:`UtteranceAsr`); Mandarin turns are then judged
on topic against the expected knowledge-base answer (:func:`judge_topics`, the rule in
:mod:`loadtest.voice_questions`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from loadtest.pcap import g711_decode, write_wav
from loadtest.voice import SIP_RATE, Heard, _resample
from loadtest.voice_questions import ASR_RATE, VOICED_RMS, Question, on_topic, similarity


def percentile(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def turns_of(heard: Sequence[Heard], out_dir: Path | None, asr: Any = None) -> list[dict[str, Any]]:
    """One record per placed question: latency on the wire, the reply text and WAV."""
    turns = []
    for c, h in enumerate(heard):
        placed = h.script.placed
        for k, pl in enumerate(placed):
            end, begun = h.speech_ends[k], h.speech_starts[k]
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
                "overlapped": bool(begun is not None and h.voiced_within(begun - 0.2, begun)),
            }
            if pl.question.expect:
                rec["expect"] = list(pl.question.expect)
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


@dataclass(frozen=True, slots=True)
class Said:
    text: str


def utterances(pcm: NDArray[Any], rate: int, *, pause_s: float = 0.6) -> list[NDArray[Any]]:
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
    breaks = np.flatnonzero(np.diff(voiced) > int(pause_s * 50))
    starts = np.concatenate(([voiced[0]], voiced[breaks + 1]))
    ends = np.concatenate((voiced[breaks], [voiced[-1]])) + 1
    return [pcm[a * frame : b * frame] for a, b in zip(starts, ends, strict=True)]


class UtteranceAsr:
    """An ASR in one language, fed a reply one voiced stretch at a time: Whisper base stops
    early on a long recording with pauses, and guesses over seconds of silence."""

    def __init__(self, asr: Any, language: str) -> None:
        self.asr, self.language = asr, language

    def transcribe_sync(self, pcm16k: NDArray[Any]) -> Said:
        texts = [
            self.asr.transcribe_sync(piece, self.language).text
            for piece in utterances(pcm16k, ASR_RATE)
        ]
        return Said(("" if self.language == "zh" else " ").join(t for t in texts if t))


def reply_asr(lang: str) -> Any:
    """What transcribes kefu's replies: the English Whisper, or for ``zh`` the multilingual
    one forced to Mandarin, utterance by utterance."""
    if lang != "zh":
        from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

        return WhisperAsr()
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

    multi = MultilingualWhisperAsr()
    if not multi.ready:
        raise SystemExit(f"voice: multilingual Whisper not loaded: {multi.error}")
    return UtteranceAsr(multi, "zh")


def judge_topics(turns: list[dict[str, Any]], entries: Mapping[str, Any]) -> None:
    """Add ``on_topic`` (see :func:`loadtest.voice_questions.on_topic`; no reply heard is
    off topic) and ``topic_similarity`` (to the expected answer) to the turns that expect
    an answer."""
    for rec in turns:
        expect = rec.get("expect")
        if not expect:
            continue
        said = rec.get("reply_text", "")
        rec["on_topic"] = on_topic(said, expect, entries)
        if expect[0] in entries:
            rec["topic_similarity"] = round(similarity(said, entries[expect[0]].answer), 2)


def stage_breakdown(
    log_path: str | Path, turns: list[dict[str, Any]], *, lang: str = "en"
) -> dict[str, Any]:
    """Percentiles of each TurnTrace stage over the interaction log's caller turns, and the
    trace matched to each turn: the one whose speech end (kefu's loop clock, which is this
    host's monotonic clock) is nearest after the turn's wire speech end; ``vad_lag_ms`` is
    how much later kefu marked the end than the wire showed it. kefu's transcript is scored
    against the question's text by WER (``transcript_wer``), for ``zh`` by CER
    (``transcript_cer``)."""
    from kefu.ai_bridge.listen.heldout import cer, wer

    score, score_key = (cer, "transcript_cer") if lang == "zh" else (wer, "transcript_wer")

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
                score_key: round(score(rec["ref"], best.get("transcript", "")), 2)
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
    out: dict[str, Any] = {
        "turns": len(turns),
        "answered": sum(t["latency_ms"] is not None for t in turns),
        "overlapped": sum(t["overlapped"] for t in turns),
        "p50_ms": percentile(clean, 50),
        "p95_ms": percentile(clean, 95),
        "max_ms": max(clean) if clean else None,
    }
    if any("on_topic" in t for t in turns):
        out["on_topic"] = sum(t.get("on_topic") is True for t in turns)
        out["topic_judged"] = sum(t.get("on_topic") is not None for t in turns)
    return out


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

"""``python -m loadtest voice``: callers that ask kefu's AI questions, timed on the wire.

Each caller plays a script: a silent lead (the greeting plays meanwhile), then questions
spaced so each answer can finish. What kefu says back is recorded, cut per question, written
as WAV and transcribed with Whisper. Questions (loadtest.voice_questions) are English
(``--make-questions DIR``: piper) or Mandarin (``--make-questions DIR --lang zh [--split S]
[--limit N]``: the in-scope understanding_zh.jsonl items, spoken by Kokoro, not kefu's
voice); ``--lang zh`` on a measuring run hears the replies with kefu's multilingual Whisper
in Mandarin and judges each turn on topic against the expected KB answer. The response
latency of a turn is measured where a caller would see it:

* SIP: SIPp replays the script as a G.711 pcap; tshark captures loopback. Speech end is the
  arrival of the caller packet carrying the question's last voiced 20 ms (the question's
  energy-VAD end on the pcap timeline); the answer starts at the first kefu->caller packet
  with energy after it.
* WebRTC: an aiortc client (loadtest.webrtc_client) plays the script in real time; speech end
  is the mic's start plus the VAD end, the answer the first received frame with energy after
  it (after aiortc's decoder and jitter buffer, so a few ms late compared with SIP).

The per-stage breakdown (endpoint, asr, dialog, tts, playout) comes from kefu's interaction
log (``KEFU_AI_INTERACTION_LOG``) when ``--interaction-log`` points at it. Everything binds
127.0.0.1: run inside a private network namespace (``unshare -n``); the SIP callers' ports
come from :func:`loadtest.peers.take_ports`, which refuses to hand any out elsewhere unless
``KEFU_PEER_PORTS_ANYWHERE=1`` (best effort on a shared host).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.pcap import g711_decode, make_rtp_pcap

# Re-exported (``X as X``): other modules import the question helpers from here.
from loadtest.voice_questions import ASR_RATE as ASR_RATE
from loadtest.voice_questions import FRAME_S as FRAME_S
from loadtest.voice_questions import VOICED_RMS as VOICED_RMS
from loadtest.voice_questions import Question as Question
from loadtest.voice_questions import load_questions as load_questions
from loadtest.voice_questions import make_questions as make_questions
from loadtest.voice_questions import speech_bounds as speech_bounds

SIP_RATE = 8000
LEAD_S = 5.0
"""Silence before the first question: kefu's greeting (~3 s) must have finished."""
GAP_S = 7.5
"""Silence after each question: room for the longest KB answers (~7 s) to play out."""


@dataclass(frozen=True, slots=True)
class Placed:
    """A question placed on a caller's timeline (seconds from the start of the script)."""

    question: Question
    start_s: float
    speech_start_s: float
    speech_end_s: float


@dataclass(frozen=True, slots=True)
class Script:
    """What one caller plays."""

    placed: tuple[Placed, ...]
    pcm: np.ndarray
    """The whole script at 16 kHz."""

    @property
    def seconds(self) -> float:
        return len(self.pcm) / ASR_RATE


@dataclass
class Heard:
    """What one call sent and heard, on one clock (seconds)."""

    script: Script
    speech_ends: list[float | None]
    """Wire time each placed question's speech ended (None: not seen on the wire)."""
    speech_starts: list[float | None]
    frames: list[tuple[float, float]] = field(default_factory=list)
    """(arrival, RMS) of each received bot frame, in arrival order."""
    reply: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))
    """Bot audio at 16 kHz, sample 0 at ``reply_t0``."""
    reply_t0: float = 0.0
    ok: bool = True
    error: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    to_monotonic: float = 0.0
    """Add to a wire time to get this host's ``time.monotonic()`` (kefu's loop clock)."""

    def first_voiced_after(self, t: float) -> float | None:
        for at, rms in self.frames:
            if at > t and rms >= VOICED_RMS:
                return at
        return None

    def voiced_within(self, a: float, b: float) -> bool:
        return any(a <= at < b and rms >= VOICED_RMS for at, rms in self.frames)

    def silence_from(self, t: float, hold_s: float = 0.5) -> float | None:
        """Start of the first stretch of ``hold_s`` without a voiced frame, at or after ``t``."""
        last_voiced = t
        for at, rms in self.frames:
            if at < t:
                continue
            if rms >= VOICED_RMS:
                if at - last_voiced >= hold_s:
                    return last_voiced
                last_voiced = at
        end = self.frames[-1][0] if self.frames else t
        return last_voiced if end - last_voiced >= hold_s else None

    def reply_between(self, a: float, b: float) -> np.ndarray:
        i = max(0, int((a - self.reply_t0) * ASR_RATE))
        j = max(i, int((b - self.reply_t0) * ASR_RATE))
        return self.reply[i:j]


# --- questions and scripts -----------------------------------------------------------------


def build_script(
    questions: Sequence[Question],
    *,
    lead_s: float = LEAD_S,
    gap_s: float = GAP_S,
    at: Sequence[float] | None = None,
    tail_s: float | None = None,
) -> Script:
    """Questions one after another (or at the ``at`` offsets, which may overlap answers)."""
    placed: list[Placed] = []
    pieces: list[tuple[int, np.ndarray]] = []
    cursor = lead_s
    for i, q in enumerate(questions):
        start = at[i] if at is not None else cursor
        s, e = speech_bounds(q.pcm, ASR_RATE)
        placed.append(Placed(q, start, start + s, start + e))
        pieces.append((int(start * ASR_RATE), q.pcm))
        cursor = start + len(q.pcm) / ASR_RATE + gap_s
    end = max(p + len(x) for p, x in pieces) / ASR_RATE
    total = end + (gap_s if tail_s is None else tail_s)
    pcm = np.zeros(int(total * ASR_RATE), np.int16)
    for pos, x in pieces:
        pcm[pos : pos + len(x)] = x
    return Script(tuple(placed), pcm)


def chunk_scripts(
    questions: Sequence[Question],
    per_call: int,
    *,
    gap_s: float = GAP_S,
    stagger_s: float = 0.0,
    concurrency: int = 1,
) -> list[Script]:
    """``per_call`` questions per call. ``stagger_s`` spreads the calls that run together
    over that many seconds (call i starts (i mod concurrency) * stagger_s / concurrency
    later), so their questions do not all end in the same instant."""
    n = max(1, concurrency)
    return [
        build_script(
            questions[i : i + per_call],
            gap_s=gap_s,
            lead_s=LEAD_S + (i // per_call % n) * stagger_s / n,
        )
        for i in range(0, len(questions), per_call)
    ]


def _resample(pcm: np.ndarray, src: int, dst: int) -> np.ndarray:
    import soxr

    if src == dst or pcm.size == 0:
        return pcm.astype(np.int16)
    return np.asarray(soxr.resample(pcm, src, dst), dtype=np.int16)


def _rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) if pcm.size else 0.0


# --- SIP callers ---------------------------------------------------------------------------


def run_sip(
    target: str,
    scripts: Sequence[Script],
    workdir: Path,
    *,
    concurrency: int = 1,
    scenario: str | Path = "uac_echo",
    variables: dict[str, object] | None = None,
    service: str | None = None,
) -> list[Heard]:
    """One SIPp call per script against ``HOST:PORT``, ``concurrency`` at a time, all under
    one tshark capture; returns what each call sent and heard on the wire. ``service`` is the
    called number (the Request-URI's user; SIPp's default is ``service``)."""
    from loadtest.peers import TsharkCapture, run_sipp, sipp_media_port, take_ports
    from loadtest.rtpcap import find_stream, rtp_streams

    workdir.mkdir(parents=True, exist_ok=True)
    ports = [sipp_media_port() for _ in scripts]
    pcaps = []
    for i, script in enumerate(scripts):
        pcaps.append(workdir / f"call{i:03d}.pcap")
        make_rtp_pcap(pcaps[-1], _resample(script.pcm, ASR_RATE, SIP_RATE))

    def one(i: int) -> Any:
        ms = int(scripts[i].seconds * 1000)
        # Only uac_echo declares audio_ms; SIPp refuses -set for an undeclared variable.
        extra_vars = {"audio_ms": ms} if str(scenario).startswith("uac_echo") else {}
        return run_sipp(
            scenario,
            target,
            media_port=ports[i],
            local_port=take_ports(),
            keys={"pcap": pcaps[i]},
            variables={**extra_vars, **(variables or {})},
            timeout=scripts[i].seconds + 25,
            extra=("-s", service) if service else (),
        )

    capture_path = workdir / "capture.pcap"
    with TsharkCapture(path=capture_path, capture_filter="udp and not port 5060"):
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            results = list(pool.map(one, range(len(scripts))))
    streams = rtp_streams(capture_path, ports=ports)
    heard = []
    for i, script in enumerate(scripts):
        h = Heard(script, [None] * len(script.placed), [None] * len(script.placed))
        h.to_monotonic = time.monotonic() - time.time()
        h.ok, h.error = results[i].ok, results[i].errors[-800:] or results[i].stderr_tail[-800:]
        heard.append(h)
        try:
            sent = find_stream(streams, src_port=ports[i])
            back = find_stream(streams, dst_port=ports[i])
        except LookupError as exc:
            h.ok, h.error = False, str(exc)
            continue
        base = sent.packets[0].timestamp
        offsets = [((p.timestamp - base) & 0xFFFFFFFF) / SIP_RATE for p in sent.packets]
        for k, pl in enumerate(script.placed):
            h.speech_ends[k] = _arrival_at(sent.packets, offsets, pl.speech_end_s - FRAME_S)
            h.speech_starts[k] = _arrival_at(sent.packets, offsets, pl.speech_start_s)
        h.frames = [
            (p.arrival, _rms(g711_decode(p.payload, p.payload_type)))
            for p in back.packets
            if p.payload_type in (0, 8)
        ]
        h.reply_t0 = sent.packets[0].arrival
        h.reply = _resample(back.pcm_by_arrival(h.reply_t0, SIP_RATE), SIP_RATE, ASR_RATE)
    return heard


def _arrival_at(packets: Sequence[Any], offsets: Sequence[float], at_s: float) -> float | None:
    for p, off in zip(packets, offsets, strict=True):
        if off >= at_s - 1e-6:
            return float(p.arrival)
    return None


# --- WebRTC callers ------------------------------------------------------------------------


async def run_webrtc(
    target: str,
    scripts: Sequence[Script],
    *,
    concurrency: int = 1,
    config_path: str | None = None,
    secret: str | None = None,
    rooms: Sequence[str] | None = None,
) -> list[Heard]:
    """One aiortc customer per script, each in a fresh room (so each gets its own AI bot);
    ``rooms`` names them (default: random ids)."""
    sem = asyncio.Semaphore(max(1, concurrency))
    names = list(rooms) if rooms is not None else [f"voice-{secrets.token_hex(4)}" for _ in scripts]
    if len(names) != len(scripts):
        raise ValueError("one room per script")

    async def guarded(script: Script, room: str) -> Heard:
        async with sem:
            return await _webrtc_call(target, script, room, config_path=config_path, secret=secret)

    return list(await asyncio.gather(*(guarded(s, r) for s, r in zip(scripts, names, strict=True))))


async def _webrtc_call(
    target: str, script: Script, room: str, *, config_path: str | None, secret: str | None
) -> Heard:
    from aiortc.mediastreams import MediaStreamError

    from loadtest.webrtc import mint_dev_token, ws_url
    from loadtest.webrtc_client import RATE, PacedPcmTrack, WebRtcClient, frame_to_mono

    class TimedClient(WebRtcClient):
        """Keeps each received frame with its arrival time and track (the base class only
        appends): with an agent in the room the caller gets two tracks, mixed afterwards."""

        timed: list[tuple[float, np.ndarray, int, int]]
        """(arrival, mono PCM, rate, track index) of every frame received."""
        track_count = 0

        async def _record(self, track: Any) -> None:
            index = self.track_count
            self.track_count += 1
            try:
                while True:
                    frame = await track.recv()
                    pcm = frame_to_mono(frame)
                    self.timed.append((time.monotonic(), pcm, frame.sample_rate, index))
            except MediaStreamError:
                pass

    if secret is not None:
        from kefu.signaling.tokens import mint_token

        token = mint_token(secret, f"voice-{secrets.token_hex(3)}", "customer", 600.0, room)
    else:
        token = mint_dev_token(room, config_path=config_path)
    mic = PacedPcmTrack(_resample(script.pcm, ASR_RATE, RATE))
    client = TimedClient(mic=mic)
    client.timed = []
    heard = Heard(script, [None] * len(script.placed), [None] * len(script.placed))
    try:
        await client.connect_ws(ws_url(target), room, token=token, display="voice")
        await asyncio.wait_for(client.connected.wait(), 10.0)
        await asyncio.sleep(script.seconds + 1.0)
        await client.leave()
    except Exception as exc:  # a refused or failed call is a result, not a crash
        heard.ok, heard.error = False, f"{type(exc).__name__}: {exc}"
    finally:
        await client.close()
    heard.events = list(client.events)
    start = mic._start  # noqa: SLF001 - the pacing origin is the mic's first frame
    if start is None or not client.timed:
        heard.ok, heard.error = False, heard.error or "no audio exchanged"
        return heard
    for k, pl in enumerate(script.placed):
        heard.speech_ends[k] = start + pl.speech_end_s
        heard.speech_starts[k] = start + pl.speech_start_s
    heard.frames = [(at, _rms(pcm)) for at, pcm, _, _ in client.timed]
    heard.reply_t0, heard.reply = mix_by_arrival(client.timed)
    return heard


def mix_by_arrival(
    timed: Sequence[tuple[float, np.ndarray, int, int]],
) -> tuple[float, np.ndarray]:
    """What a listener heard from several received tracks, mixed at 16 kHz: ``timed`` holds
    (arrival time, mono PCM, sample rate, track index) per frame. Each frame is placed where
    it arrived, ending at its arrival, but never over the end of the track's previous frame
    (a burst after a delay is laid end to end); silence fills each track's gaps; the tracks
    are summed (clipped to 16 bits). Returns (time of sample 0, PCM)."""
    if not timed:
        return 0.0, np.zeros(0, np.int16)
    t0 = min(at - len(pcm) / rate for at, pcm, rate, _ in timed)
    pieces: list[tuple[int, np.ndarray]] = []
    ends: dict[int, int] = {}
    for at, pcm, rate, track in sorted(timed, key=lambda f: f[0]):
        chunk = _resample(pcm, rate, ASR_RATE)
        start = max(int(round((at - t0) * ASR_RATE)) - len(chunk), ends.get(track, 0), 0)
        ends[track] = start + len(chunk)
        pieces.append((start, chunk))
    mix = np.zeros(max(ends.values()), np.int32)
    for start, chunk in pieces:
        mix[start : start + len(chunk)] += chunk
    return t0, np.clip(mix, -32768, 32767).astype(np.int16)


def barge_in_scripts(calls: int) -> list[Script]:
    """Calls that ask for a long answer and cut in 2 s into it with a second question."""
    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    voice = piper_voice()
    long_q = Question("long", speak(voice, BARGE_LONG), BARGE_LONG)
    second = Question("second", speak(voice, BARGE_SECOND), BARGE_SECOND)
    # The bot starts ~0.8 s after the question ends: cut in ~2 s into its answer.
    cut = LEAD_S + len(long_q.pcm) / ASR_RATE + 2.8
    return [build_script([long_q, second], at=[LEAD_S, cut], tail_s=GAP_S) for _ in range(calls)]


BARGE_LONG = "Where is your nearest store?"
BARGE_SECOND = "Do you take gift cards?"


# --- CLI -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", help="sip:HOST:PORT or http://HOST:PORT")
    parser.add_argument("--questions", help="folder of question WAVs (+ refs.tsv)")
    parser.add_argument("--json", dest="json_out", help="write the report here (replies beside)")
    parser.add_argument("--concurrency", type=int, default=1, help="calls at the same time")
    parser.add_argument("--per-call", type=int, default=3, help="questions asked in one call")
    parser.add_argument("--repeat", type=int, default=1, help="ask the whole set N times")
    parser.add_argument("--gap", type=float, default=GAP_S, help="silence after a question (s)")
    parser.add_argument(
        "--stagger", type=float, default=0.0, help="spread concurrent calls over S seconds"
    )
    parser.add_argument("--interaction-log", help="kefu's JSONL interaction log, for stages")
    parser.add_argument("--config", help="kefu config (WebRTC: the JWT secret)")
    parser.add_argument("--no-asr", action="store_true", help="do not transcribe the replies")
    parser.add_argument(
        "--make-questions", metavar="DIR", help="write the held-out questions as WAVs and exit"
    )
    parser.add_argument(
        "--lang",
        choices=("en", "zh"),
        default="en",
        help="question language: zh makes Mandarin questions and hears replies in Mandarin",
    )
    parser.add_argument(
        "--split",
        choices=("dev", "heldout", "all"),
        default="heldout",
        help="--make-questions --lang zh: which split of understanding_zh.jsonl",
    )
    parser.add_argument("--limit", type=int, help="--make-questions: only the first N")
    parser.add_argument(
        "--barge-in", type=int, metavar="N", help="N calls that interrupt a long answer (SIP)"
    )
    parser.add_argument(
        "--wer", action="store_true", help="Whisper WER on --questions, clean and over G.711"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from loadtest.voice_report import judge_topics, reply_asr, stage_breakdown, summarize, turns_of

    questions = load_questions(args.questions) * max(1, args.repeat)
    scripts = chunk_scripts(
        questions,
        max(1, args.per_call),
        gap_s=args.gap,
        stagger_s=args.stagger,
        concurrency=args.concurrency,
    )
    out_dir = Path(args.json_out).resolve().parent if args.json_out else None
    started = time.time()
    target: str = args.target
    if target.startswith("sip:"):
        with tempfile.TemporaryDirectory(prefix="kefu-voice-") as tmp:
            heard = run_sip(target[4:], scripts, Path(tmp), concurrency=args.concurrency)
    else:
        heard = asyncio.run(
            run_webrtc(target, scripts, concurrency=args.concurrency, config_path=args.config)
        )
    lang = getattr(args, "lang", "en")
    asr = None
    if not args.no_asr:
        asr = reply_asr(lang)
    turns = turns_of(heard, out_dir, asr)
    if lang == "zh" and asr is not None:
        from loadtest.understanding import kb_entries

        judge_topics(turns, kb_entries())
    summary: dict[str, Any] = {
        "target": target,
        "transport": "sip" if target.startswith("sip:") else "webrtc",
        "lang": lang,
        "concurrency": args.concurrency,
        "calls": len(scripts),
        "failed_calls": [{"call": i, "error": h.error} for i, h in enumerate(heard) if not h.ok],
        "wall_s": round(time.time() - started, 1),
        **summarize(turns),
    }
    if args.interaction_log:
        summary["stages_ms"] = stage_breakdown(args.interaction_log, turns, lang=lang)
    summary["turn_records"] = turns
    return summary


def _write(summary: dict[str, Any], out: str | None) -> None:
    text = json.dumps(summary, indent=2, default=str, ensure_ascii=False)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
    brief = {k: v for k, v in summary.items() if k not in ("rows", "turn_records")}
    sys.stdout.write(json.dumps(brief, indent=2, default=str, ensure_ascii=False) + "\n")


def main(args: argparse.Namespace) -> int:
    from loadtest.voice_report import barge_in_report, turns_of, wer_report

    if args.make_questions:
        qs = make_questions(args.make_questions, args.limit, lang=args.lang, split=args.split)
        made = {"questions": len(qs), "dir": args.make_questions, "lang": args.lang}
        sys.stdout.write(json.dumps(made) + "\n")
        return 0
    if args.wer:
        if args.lang != "en":
            sys.stderr.write(
                "voice: --wer is English only (Mandarin: python -m loadtest mandarin)\n"
            )
            return 2
        from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

        summary = wer_report(load_questions(args.questions), WhisperAsr())
        _write(summary, args.json_out)
        return 0
    if args.barge_in:
        if not (args.target or "").startswith("sip:"):
            sys.stderr.write("voice: --barge-in needs --target sip:HOST:PORT\n")
            return 2
        with tempfile.TemporaryDirectory(prefix="kefu-voice-") as tmp:
            heard = run_sip(
                args.target[4:],
                barge_in_scripts(args.barge_in),
                Path(tmp),
                concurrency=args.concurrency,
            )
        summary = barge_in_report(heard)
        turns = turns_of(heard, None)
        summary["second_answer_latency_ms"] = [t["latency_ms"] for t in turns[1::2]]
        _write(summary, args.json_out)
        return 0 if summary["measured"] else 1
    if not (args.target and args.questions):
        sys.stderr.write("voice: --target and --questions are required\n")
        return 2
    summary = run(args)
    _write(summary, args.json_out)
    if args.json_out:
        from loadtest.voice_plots import write_plots

        for picture in write_plots(summary, Path(args.json_out)):
            sys.stderr.write(f"voice: wrote {picture}\n")
    return 0 if summary["answered"] and not summary["failed_calls"] else 1

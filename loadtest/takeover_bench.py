"""``python -m loadtest takeover``: an agent takes a call over mid-answer and hands it back,
timed on the wire at the SIP caller.

::

    python -m loadtest takeover --target-sip HOST:PORT --target-http http://HOST:PORT \\
        [--cycles N] [--concurrent-agents K] [--ai-calls M] [--kefu-pid PID] [--json OUT]

A round is K SIPp callers (``uac_echo``, G.711 µ-law, started ``--stagger`` s apart) plus M
callers nobody takes over, all under one tshark capture of their media ports. Every caller
plays the same script (:mod:`loadtest.takeover_caller`: Q1 to the AI, thanks to the agent
during the takeover, Q2 to the AI again); each of the K callers has an agent in this process
(:mod:`loadtest.takeover_agent`) that takes the call over about 1 s into the bot's answer to Q1,
speaks, and hands the call back.

This module holds the settings, the rounds and the CLI; the rest lives in

* :mod:`loadtest.takeover_caller`: the callers' script, and what the capture says of each;
* :mod:`loadtest.takeover_agent`: the agent (a timed WebRTC client, the API, the events);
* :mod:`loadtest.takeover_frames`: audio as (arrival, RMS) per 20 ms frame;
* :mod:`loadtest.takeover_bot_agent`: the bot's and the agent's voice at the caller;
* :mod:`loadtest.takeover_caller_frames`: the caller's frames the agent heard;
* :mod:`loadtest.takeover_record`: every measure of one takeover (its doc says what each is);
* :mod:`loadtest.takeover_report`: percentiles over all takeovers, and the table row;
* :mod:`loadtest.takeover_cpu`: kefu's CPU (``--kefu-pid``) and the bench's own.

With ``--kefu-pid`` the CPU of kefu (the process and its children, /proc/PID/stat) is sampled
every 0.25 s and reported over each round and over the stretch when all K agents held their
calls at once.

Everything binds 127.0.0.1: run inside ``unshare -n`` next to kefu in media mode ``ai`` with
``KEFU_WEBRTC_ICE_HOST_ADDRESSES=127.0.0.1`` (docs/BENCHMARKS.md "AI voice loop" shows the
start-up). The agent's token is minted with kefu's own secret (``--config`` / ``KEFU_*``
environment, as ``kefu token``) unless ``--token`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.takeover_agent import (
    AGENT_LEAD_S,
    AGENT_LINE,
    AGENT_LISTEN_S,
    CUT_IN_S,
    AgentRun,
    agent_wav,
    caller_track,
    from_port,
    run_call_agent,
    voiced_after,
)
from loadtest.takeover_bot_agent import find_repeat, last_audible, repeat_after, split_bot_agent
from loadtest.takeover_caller import (
    CALLER_THANKS,
    LEAD_S,
    Q2_AT_S,
    THANKS_AT_S,
    CallWire,
    caller_script,
    timestamp_skips,
    wire_of,
)
from loadtest.takeover_caller_frames import best_match, estimate_lag, match_frames, pick_track
from loadtest.takeover_cpu import CpuSampler, cpu_between, cpu_span
from loadtest.takeover_frames import voiced_flags
from loadtest.takeover_record import caller_transcripts, ms, takeover_record, word_recall
from loadtest.takeover_report import HEADER, stats, summarize, table_row
from loadtest.voice import ASR_RATE, BARGE_LONG, BARGE_SECOND, SIP_RATE, Script

__all__ = [
    # this module: the settings, the rounds, the CLI
    "STAGGER_S",
    "Settings",
    "add_arguments",
    "main",
    "run",
    "run_round",
    "settings_from_args",
    # the rest of the tool, importable from here as before
    "HEADER",
    "CallWire",
    "best_match",
    "caller_track",
    "caller_transcripts",
    "cpu_between",
    "cpu_span",
    "estimate_lag",
    "find_repeat",
    "from_port",
    "last_audible",
    "match_frames",
    "pick_track",
    "repeat_after",
    "split_bot_agent",
    "stats",
    "summarize",
    "table_row",
    "takeover_record",
    "timestamp_skips",
    "voiced_after",
    "voiced_flags",
    "word_recall",
]

STAGGER_S = 1.0


# --- the live part --------------------------------------------------------------------------


@dataclass
class Settings:
    target_sip: str
    target_http: str
    cycles: int = 5
    agents: int = 1
    ai_calls: int = 0
    stagger_s: float = STAGGER_S
    cut_in_s: float = CUT_IN_S
    kefu_pid: int | None = None
    token: str | None = None
    config_path: str | None = None
    keep: Path | None = None


async def run_round(
    s: Settings, round_no: int, script: Script, wav: Path, wav_voiced: list[bool], workdir: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """K callers with agents and M without, one capture; the takeover records and the
    round's own numbers."""
    import aiohttp

    from loadtest.agent_client import mint_agent_token
    from loadtest.kefu_process import load_average
    from loadtest.pcap import make_rtp_pcap
    from loadtest.peers import TsharkCapture, run_sipp, sipp_media_port, take_ports
    from loadtest.rtpcap import rtp_streams
    from loadtest.voice import _resample

    n = s.agents + s.ai_calls
    media_ports = [sipp_media_port() for _ in range(n)]
    sip_ports = [take_ports() for _ in range(n)]
    pcap = workdir / "caller.pcap"
    if not pcap.exists():
        make_rtp_pcap(pcap, _resample(script.pcm, ASR_RATE, SIP_RATE))
    tokens = [
        s.token or mint_agent_token(config_path=s.config_path, user=f"takeover-bench-{i}")
        for i in range(s.agents)
    ]
    capture_path = workdir / f"round{round_no:02d}.pcap"
    info: dict[str, Any] = {"round": round_no, "load_start": load_average()}
    cpu = CpuSampler(s.kefu_pid)
    runs = [AgentRun(i) for i in range(s.agents)]

    async def caller(i: int) -> Any:
        await asyncio.sleep(i * s.stagger_s)
        return await asyncio.to_thread(
            run_sipp,
            "uac_echo",
            s.target_sip,
            media_port=media_ports[i],
            local_port=sip_ports[i],
            keys={"pcap": pcap},
            variables={"audio_ms": int(script.seconds * 1000)},
            timeout=script.seconds + 25,
        )

    started = time.time()
    async with TsharkCapture(path=capture_path, ports=media_ports):
        cpu.start()
        async with aiohttp.ClientSession() as session:
            agents = [
                asyncio.create_task(
                    run_call_agent(s, session, runs[i], sip_ports[i], tokens[i], wav, workdir)
                )
                for i in range(s.agents)
            ]
            sipps = await asyncio.gather(*(caller(i) for i in range(n)))
            await asyncio.gather(*agents)
            for r in runs:
                if r.events is not None:
                    await r.events.close()
        await cpu.stop()
    ended = time.time()
    info["load_end"] = load_average()
    streams = rtp_streams(capture_path, ports=media_ports)
    records = []
    for i in range(n):
        wire = wire_of(script, streams, media_ports[i])
        res = sipps[i]
        if not res.ok:
            wire.heard.ok = False
            wire.heard.error = (res.errors or res.stderr_tail)[-800:] or "SIPp failed"
        if i >= s.agents:
            h = wire.heard
            q1 = h.speech_ends[0]
            info.setdefault("ai_only_answer_ms", []).append(
                ms(h.first_voiced_after(q1), q1) if q1 is not None else None
            )
            continue
        r = runs[i]
        rec = takeover_record(
            wire,
            {**r.summary, "bot_heard_at": r.bot_heard_at},
            wav_voiced=wav_voiced,
            tracks=r.tracks,
            kefu_rtp=r.kefu_rtp,
            transcripts=caller_transcripts(r.events.events if r.events else []),
        )
        rec.update(round=round_no, caller=i, back_ssrcs=wire.back_ssrcs)
        records.append(rec)
        if s.keep:
            frames_json = {
                "record": rec,
                "caller_sent": wire.sent,
                "caller_received": wire.heard.frames,
                "agent_tracks": r.tracks,
            }
            dump = workdir / f"round{round_no:02d}-call{i:02d}-frames.json"
            dump.write_text(json.dumps(frames_json, default=str) + "\n")
    info["seconds"] = round(ended - started, 1)
    info["bench_cpu_pct"] = cpu_span(cpu.own)
    if s.kefu_pid is not None:
        info["kefu_cpu_pct"] = cpu_span(cpu.kefu)
        acks = [float(r["t_ack"]) for r in records if r.get("t_ack")]
        backs = [float(r["t_handback_click"]) for r in records if r.get("t_handback_click")]
        if records and len(acks) == len(backs) == len(records):
            a, b = max(acks), min(backs)
            info["all_held_s"] = round(b - a, 2) if b > a else 0.0
            if b - a >= 1.0:
                info["kefu_cpu_all_held_pct"] = cpu_between(cpu.kefu, a, b)
    if not s.keep:
        capture_path.unlink(missing_ok=True)
    return records, info


def run(s: Settings) -> dict[str, Any]:
    from kefu.ai_bridge.listen.heldout import piper_voice
    from loadtest.kefu_process import load_average

    voice = piper_voice()
    script = caller_script(voice)
    workdir = Path(s.keep) if s.keep else Path(tempfile.mkdtemp(prefix="kefu-takeover-"))
    workdir.mkdir(parents=True, exist_ok=True)
    wav = workdir / "agent.wav"
    wav_voiced = agent_wav(voice, wav)
    load_start = load_average()
    records: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    started = time.time()
    try:
        for r in range(max(1, s.cycles)):
            recs, info = asyncio.run(run_round(s, r, script, wav, wav_voiced, workdir))
            records.extend(recs)
            rounds.append(info)
            sys.stderr.write(
                f"takeover: round {r + 1}/{s.cycles}: "
                + ", ".join(
                    f"stop {x.get('bot_stop_ms')} ms, agent {x.get('first_agent_audio_ms')} ms"
                    for x in recs
                )
                + "\n"
            )
    finally:
        if not s.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    summary: dict[str, Any] = {
        "target_sip": s.target_sip,
        "target_http": s.target_http,
        "rounds": max(1, s.cycles),
        "concurrent_agents": s.agents,
        "ai_calls": s.ai_calls,
        "cut_in_s": s.cut_in_s,
        "stagger_s": s.stagger_s,
        "kefu_pid": s.kefu_pid,
        "wall_s": round(time.time() - started, 1),
        "load": {"start": load_start, "end": load_average()},
        "script": {
            "q1": BARGE_LONG,
            "q1_at_s": LEAD_S,
            "thanks": CALLER_THANKS,
            "thanks_at_s": THANKS_AT_S,
            "q2": BARGE_SECOND,
            "q2_at_s": Q2_AT_S,
            "agent_line": AGENT_LINE,
            "agent_lead_s": AGENT_LEAD_S,
            "agent_listen_s": AGENT_LISTEN_S,
        },
    }
    summary.update(summarize(records, rounds))
    summary["round_records"] = rounds
    summary["records"] = records
    return summary


# --- CLI ------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target-sip", required=True, help="kefu's SIP address, HOST:PORT")
    parser.add_argument("--target-http", required=True, help="kefu's HTTP base URL")
    parser.add_argument(
        "--cycles", type=_positive_int, default=5, help="rounds, one after another (default 5)"
    )
    parser.add_argument(
        "--concurrent-agents",
        type=_positive_int,
        default=1,
        metavar="K",
        help="callers taken over at once in a round, one agent each (default 1)",
    )
    parser.add_argument(
        "--ai-calls", type=int, default=0, metavar="M", help="callers per round left to the AI"
    )
    parser.add_argument(
        "--stagger", type=float, default=STAGGER_S, help="seconds between callers' starts"
    )
    parser.add_argument(
        "--cut-in",
        type=float,
        default=CUT_IN_S,
        help=f"seconds from the agent hearing the bot's answer to the click (default {CUT_IN_S})",
    )
    parser.add_argument("--kefu-pid", type=int, help="kefu's PID: report its CPU (/proc)")
    parser.add_argument("--token", help="agent JWT instead of minting one")
    parser.add_argument("--config", help="kefu config file for the JWT secret")
    parser.add_argument("--keep", help="keep captures, WAVs and the agent's recordings here")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def settings_from_args(args: argparse.Namespace) -> Settings:
    target_sip = str(args.target_sip).removeprefix("sip:")
    return Settings(
        target_sip=target_sip,
        target_http=args.target_http,
        cycles=args.cycles,
        agents=args.concurrent_agents,
        ai_calls=max(0, args.ai_calls),
        stagger_s=args.stagger,
        cut_in_s=args.cut_in,
        kefu_pid=args.kefu_pid,
        token=args.token,
        config_path=args.config,
        keep=Path(args.keep) if args.keep else None,
    )


def main(args: argparse.Namespace) -> int:
    summary = run(settings_from_args(args))
    text = json.dumps(summary, indent=2, default=str)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    brief = {k: v for k, v in summary.items() if k not in ("records", "round_records")}
    sys.stdout.write(json.dumps(brief, indent=2, default=str) + "\n\n")
    sys.stdout.write(HEADER + "\n" + table_row(summary) + "\n")
    every = summary["takeovers"] > 0 and summary["ok"] == summary["takeovers"]
    return 0 if every and summary["measured"] == summary["takeovers"] else 1

"""``python -m loadtest avatar-calls``: N web callers at once, each seeing the AI's avatar.

Each caller is ``loadtest webrtc`` (:func:`loadtest.webrtc.run_call`) in its own room, silent
(the bot greets it), recording what it hears, the weights it gets and, with ``--mode video``,
the avatar's video. Per call it reports the frames received per second (video and weights),
the time from connected to the first video frame, and the lip-sync offset measured on the
received video and on the weights against the received voice (:mod:`loadtest.avatar_sync`).
The summary gives the lowest frame rate, how many calls held 25 fps, and p50/p95 of the
offsets. kefu must run in AI mode with ``ai.avatar = "video"``; callers start ``--stagger``
seconds apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.avatar_sync import lipsync_offset, read_heard, video_mouth
from loadtest.pcap import write_wav
from loadtest.video_record import read_y4m
from loadtest.webrtc import run_call

__all__ = ["add_arguments", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="kefu's HTTP base URL")
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0, help="each call's length")
    parser.add_argument("--stagger", type=float, default=1.0, help="seconds between joins")
    parser.add_argument("--mode", choices=("video", "weights"), default="video")
    parser.add_argument("--config", default=None, help="kefu config for the JWT secret")
    parser.add_argument("--json", dest="json_out")
    parser.add_argument(
        "--keep", default=None, metavar="DIR", help="keep each call's heard/w/v files in DIR"
    )


def _offset(heard: Path, times: np.ndarray, mouth: np.ndarray) -> dict[str, Any] | None:
    if len(times) < 30:
        return None
    try:
        audio, rate, t0 = read_heard(heard)
        return lipsync_offset(audio, rate, t0, times, mouth)
    except (FileNotFoundError, ValueError):
        return None


def _one(folder: Path, index: int, summary: dict[str, Any], mode: str) -> dict[str, Any]:
    row: dict[str, Any] = {"call": index, "ok": summary["ok"], "error": summary.get("error")}
    heard = folder / f"heard-{index}.wav"
    rows = [json.loads(x) for x in (folder / f"w-{index}.jsonl").read_text().splitlines() if x]
    if len(rows) > 1:
        t = np.array([r["t"] for r in rows])
        row["weights_fps"] = round((len(t) - 1) / (t[-1] - t[0]), 2)
        by_weights = _offset(heard, t, np.array([r["jawOpen"] for r in rows]))
        row["weights_offset_ms"] = by_weights["offset_ms"] if by_weights else None
    video = folder / f"v-{index}.y4m"
    if mode == "video" and video.exists():
        lumas, times = read_y4m(video)
        if len(times) > 1:
            span = times[-1] - times[0]
            row["video_fps"] = round((len(times) - 1) / span, 2)
            row["video_frames"] = len(times)
            row["first_frame_s"] = round(times[0] - summary["_connected_at"], 3)
            by_video = _offset(heard, np.array(times), video_mouth(lumas))
            row["video_offset_ms"] = by_video["offset_ms"] if by_video else None
            row["video_r"] = by_video["r_at_offset"] if by_video else None
    return row


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    mic = folder / "silence.wav"
    write_wav(mic, np.zeros(int(48000 * args.seconds), np.int16), 48000)

    async def call(index: int) -> dict[str, Any]:
        await asyncio.sleep(index * args.stagger)
        started = time.time()
        summary = await run_call(
            args.target,
            mic,
            folder / f"heard-{index}.wav",
            seconds=args.seconds,
            config_path=args.config,
            weights=folder / f"w-{index}.jsonl",
            video_record=folder / f"v-{index}.y4m" if args.mode == "video" else None,
        )
        summary["_connected_at"] = started + float(summary.get("connect_s") or 0.0)
        return summary

    summaries = await asyncio.gather(*(call(i) for i in range(args.calls)))
    rows = [_one(folder, i, s, args.mode) for i, s in enumerate(summaries)]
    return summarize(rows, args.mode)


def summarize(rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    def pct(key: str, q: float, absolute: bool = False) -> float | None:
        values = [abs(r[key]) if absolute else r[key] for r in rows if r.get(key) is not None]
        return round(float(np.percentile(values, q)), 1) if values else None

    fps_key = "video_fps" if mode == "video" else "weights_fps"
    rates = [r.get(fps_key) or 0.0 for r in rows]
    return {
        "mode": mode,
        "calls": len(rows),
        "ok": sum(1 for r in rows if r["ok"]),
        "fps_min": round(min(rates), 2) if rates else None,
        "calls_at_25fps": sum(1 for f in rates if f >= 25.0),
        "first_frame_s_p50": pct("first_frame_s", 50),
        "video_offset_ms_p50": pct("video_offset_ms", 50),
        "video_offset_ms_abs_p95": pct("video_offset_ms", 95, absolute=True),
        "weights_offset_ms_p50": pct("weights_offset_ms", 50),
        "weights_offset_ms_abs_p95": pct("weights_offset_ms", 95, absolute=True),
        "rows": rows,
    }


def main(args: argparse.Namespace) -> int:
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        summary = asyncio.run(run(args, Path(args.keep)))
    else:
        with tempfile.TemporaryDirectory(prefix="avatar-calls-") as tmp:
            summary = asyncio.run(run(args, Path(tmp)))
    text = json.dumps(summary, indent=2)
    sys.stdout.write(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0 if summary["ok"] == summary["calls"] else 1

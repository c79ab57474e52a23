"""What call recording costs: kefu's CPU and the disk it writes, per call-minute (issue 15).

``python -m loadtest recording``: the echo-calls measurement of ``tls-srtp --echo-only``
(:func:`loadtest.rtp_relay.kefu_phase`: N plain-RTP PCMU echo calls from one generator
process, 50 packets/s each way) twice against a fresh ``kefu serve --media-mode echo``,
first with recording off, then with ``KEFU_CALLS_RECORD=true`` and
``KEFU_CALLS_RECORDINGS_DIR`` a temporary folder. Reported:

* kefu's CPU % over the send window, off and on, and the difference as core-seconds per
  call-minute (steady state: what the RTP path's copy into the queue and the writer thread's
  decode and raw writes cost);
* the close: kefu's CPU from the first BYE until every recording is on disk (the writer
  interleaves the two raw channels into the WAV), off and on, and the difference per call;
* bytes per call-minute: the recordings' total size over the calls' total minutes;
* that every call left one WAV whose length (from its header) matches the call's, to
  ``--tolerance`` seconds.

Needs a private network namespace (``unshare -n sh -c 'ip link set lo up && ...'``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import wave
from pathlib import Path
from typing import Any

from kefu.mediaserver.logs import configure_logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=50, help="concurrent echo calls")
    parser.add_argument("--seconds", type=float, default=20.0, help="send window per phase")
    parser.add_argument(
        "--tolerance", type=float, default=0.5, help="WAV length vs call length, seconds"
    )
    parser.add_argument("--no-uvloop", action="store_true", help="kefu on stock asyncio")
    parser.add_argument("--json", dest="json_out")


def wav_files(folder: Path) -> list[dict[str, Any]]:
    """Every finished recording under ``folder`` (``<day>/<call id>.wav``): its size in
    bytes and, from its header, its length in seconds, channels and rate."""
    out = []
    for path in sorted(folder.glob("*/*.wav")):
        with wave.open(str(path), "rb") as w:
            frames, rate, channels = w.getnframes(), w.getframerate(), w.getnchannels()
        out.append(
            {
                "name": path.name,
                "bytes": path.stat().st_size,
                "seconds": frames / rate if rate else 0.0,
                "channels": channels,
                "rate": rate,
            }
        )
    return out


def match_lengths(
    call_seconds: list[float], wav_seconds: list[float], tolerance: float
) -> dict[str, Any]:
    """Pair calls with recordings by length (a file is named by kefu's call id, which the
    caller never sees: the longest call is the longest file, and so on) and judge each pair.
    """
    calls, wavs = sorted(call_seconds), sorted(wav_seconds)
    diffs = [w - c for c, w in zip(calls, wavs, strict=False)]
    worst = max((abs(d) for d in diffs), default=0.0)
    return {
        "calls": len(calls),
        "files": len(wavs),
        "worst_abs_diff_s": round(worst, 3),
        "mean_diff_s": round(sum(diffs) / len(diffs), 3) if diffs else None,
        "ok": len(calls) == len(wavs) and worst <= tolerance,
    }


def per_call_minute(
    off: dict[str, Any], on: dict[str, Any], calls: int, file_bytes: int, call_seconds: float
) -> dict[str, Any]:
    """The costs per call-minute from two ``kefu_phase`` results (off, on).

    ``relay_cpu_pct`` is % of one core with ``calls`` calls up, so the extra core-seconds per
    call-second is ``(on - off) / 100 / calls``; x 60 per call-minute. The close's extra CPU
    is per call (it grows with the call's length). Bytes: ``file_bytes`` over the calls'
    total minutes ``call_seconds / 60``.
    """
    extra_pct = on["relay_cpu_pct"] - off["relay_cpu_pct"]
    steady = extra_pct / 100 / calls * 60
    close_extra = on["close_cpu_s"] - off["close_cpu_s"]
    minutes = call_seconds / 60
    return {
        "extra_cpu_pct": round(extra_pct, 2),
        "extra_core_s_per_call_minute": round(steady, 4),
        "close_extra_core_ms_per_call": round(1000 * close_extra / calls, 2),
        "total_core_s_per_call_minute": round(steady + close_extra / minutes, 4)
        if minutes
        else None,
        "call_minutes": round(minutes, 3),
        "bytes_per_call_minute": round(file_bytes / minutes) if minutes else None,
    }


def run(
    calls: int, seconds: float, *, uvloop: bool = True, tolerance: float = 0.5
) -> dict[str, Any]:
    from loadtest.kefu_process import load_average
    from loadtest.rtp_relay import kefu_phase

    before = load_average()
    off = kefu_phase(calls, seconds, uvloop)
    with tempfile.TemporaryDirectory(prefix="kefu-bench-recordings-") as folder:
        on = kefu_phase(calls, seconds, uvloop, record_dir=Path(folder))
        files = wav_files(Path(folder))
    call_seconds = on.pop("call_seconds")
    file_bytes = sum(f["bytes"] for f in files)
    wav_seconds = [f["seconds"] for f in files]
    costs = per_call_minute(off, on, calls, file_bytes, sum(call_seconds))
    check = match_lengths(call_seconds, wav_seconds, tolerance)
    return {
        "benchmark": "recording",
        "calls": calls,
        "seconds": seconds,
        "off": off,
        "on": on,
        "files": {
            "count": len(files),
            "bytes": file_bytes,
            "formats": sorted({f"{f['channels']}ch {f['rate']} Hz" for f in files}),
            "seconds_min": round(min(wav_seconds), 3) if files else None,
            "seconds_max": round(max(wav_seconds), 3) if files else None,
        },
        "call_seconds_min": round(min(call_seconds), 3),
        "call_seconds_max": round(max(call_seconds), 3),
        **costs,
        "lengths": check,
        "pass": check["ok"] and on["recordings_total"].get("failed", 0) == 0,
        "load_average": [before, load_average()],
    }


HEADER = (
    "| calls | seconds | CPU % off | CPU % on | extra core-s / call-min "
    "| close extra core-ms / call | bytes / call-min | files | WAV vs call, worst s "
    "| loss % off / on |\n" + "|" + " --- |" * 10
)


def row(s: dict[str, Any]) -> str:
    return (
        f"| {s['calls']} | {s['seconds']:g} | {s['off']['relay_cpu_pct']:.1f} "
        f"| {s['on']['relay_cpu_pct']:.1f} | {s['extra_core_s_per_call_minute']:.4f} "
        f"| {s['close_extra_core_ms_per_call']:.1f} | {s['bytes_per_call_minute']:,} "
        f"| {s['files']['count']}/{s['calls']} | {s['lengths']['worst_abs_diff_s']:.3f} "
        f"| {s['off']['loss_pct']:.3f} / {s['on']['loss_pct']:.3f} |"
    )


def main(args: argparse.Namespace) -> int:
    configure_logging("warning", json=False)
    summary = run(args.calls, args.seconds, uvloop=not args.no_uvloop, tolerance=args.tolerance)
    text = json.dumps(summary, indent=2)
    print(text + "\n\n" + HEADER + "\n" + row(summary))  # noqa: T201 - the tool's report
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0 if summary["pass"] else 1

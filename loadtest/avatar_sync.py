"""``python -m loadtest avatar-sync HEARD.wav WEIGHTS.jsonl|VIDEO.y4m``: the avatar's lip-sync,
measured where the caller is.

Inputs are what ``python -m loadtest webrtc --record HEARD.wav --weights WEIGHTS.jsonl`` wrote:
the audio heard (with ``HEARD.wav.times``, the arrival time of its first sample) and one line
per received blendshape frame (its arrival time ``t`` and ``jawOpen``), both on this host's
``time.time()``. The audio's RMS envelope (30 ms windows on a 10 ms grid) is cross-correlated
with ``jawOpen`` interpolated on the same grid, over ±``--max-lag-ms``. A positive offset: the
mouth moves after the voice; negative: before it. Prints one JSON summary.

Given the video ``--video-record`` wrote instead (``VIDEO.y4m`` with ``VIDEO.y4m.times``), the
mouth's opening is read from the pictures (:func:`video_mouth`): how far the pixels that change
most in the lower half of the frame are from how they look at rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_arguments", "lipsync_offset", "main", "read_heard", "video_mouth"]

GRID_S = 0.01
WINDOW_S = 0.03
VOICED_RMS = 300.0


def lipsync_offset(
    audio: np.ndarray,
    rate: int,
    audio_t0: float,
    frame_times: np.ndarray,
    jaw: np.ndarray,
    *,
    max_lag_ms: int = 300,
) -> dict[str, Any]:
    """The lag of ``jaw`` (per frame, at ``frame_times``) behind the voice in ``audio`` (first
    sample at ``audio_t0``) that correlates best; see the module's doc."""
    start = max(float(frame_times[0]), audio_t0)
    stop = min(float(frame_times[-1]), audio_t0 + len(audio) / rate - WINDOW_S)
    if stop - start < 1.0:
        raise ValueError("the audio and the frames overlap by less than a second")
    grid = np.arange(start, stop, GRID_S)
    window = int(WINDOW_S * rate)
    first = ((grid - audio_t0) * rate).astype(int)
    pcm = audio.astype(np.float64)
    env = np.array([np.sqrt(np.mean(pcm[i : i + window] ** 2)) for i in first])
    mouth = np.interp(grid, frame_times, jaw)
    steps = max_lag_ms // 10
    best_lag, best_r = 0, -2.0
    for lag in range(-steps, steps + 1):
        # mouth[k + lag] against env[k]: a positive lag means the mouth comes later.
        a = mouth[max(0, lag) : len(mouth) + min(0, lag)]
        b = env[max(0, -lag) : len(env) - max(0, lag)]
        r = float(np.corrcoef(a, b)[0, 1])
        if r > best_r:
            best_lag, best_r = lag, r
    voiced = env >= VOICED_RMS
    return {
        "frames": int(len(frame_times)),
        "fps": round(float((len(frame_times) - 1) / (frame_times[-1] - frame_times[0])), 2),
        "voiced_s": round(float(voiced.sum() * GRID_S), 2),
        "jaw_voiced": round(float(mouth[voiced].mean()), 3) if voiced.any() else None,
        "jaw_silent": round(float(mouth[~voiced].mean()), 3) if (~voiced).any() else None,
        "r_at_0": round(float(np.corrcoef(mouth, env)[0, 1]), 3),
        "offset_ms": best_lag * 10,
        "r_at_offset": round(best_r, 3),
    }


def read_heard(path: str | Path) -> tuple[np.ndarray, int, float]:
    """What ``--record`` wrote: the samples, their rate, and the arrival time of the first
    (``<path>.times``); FileNotFoundError when either file is missing."""
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        audio = np.frombuffer(w.readframes(w.getnframes()), "<i2")
    return audio, rate, float(Path(f"{path}.times").read_text().split()[0])


def video_mouth(lumas: np.ndarray) -> np.ndarray:
    """One value per frame that grows as the mouth opens, from luma planes (frames × h × w).

    The mouth region is found, not assumed: of the frame's lower half (below the eyes' blinks)
    and middle third (inside the outline of a swaying head and its hair), the 2 % of pixels
    whose brightness varies most over the recording; the value is how far those pixels are
    from their median (the mouth at rest, as it is most of the time) in each frame: the dark
    inside, the teeth and the moving lips all count; less its floor over 1.5 s (the head's
    slow sway)."""
    height, width = lumas.shape[1:]
    lower = lumas[:, height // 2 :, width // 3 : 2 * width // 3].astype(np.float32)
    spread = lower.std(axis=0)
    mask = spread >= np.quantile(spread, 0.98)
    region = lower[:, mask]
    raw = np.abs(region - np.median(region, axis=0)[None, :]).mean(axis=1).astype(np.float64)
    # The head's slow sway moves those pixels too (periods of seconds); the mouth moves within
    # a syllable. Take away the running floor over 1.5 s (45 frames at 30 fps).
    half = 22
    padded = np.pad(raw, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)
    return np.asarray(raw - windows.min(axis=1), np.float64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("heard", help="the WAV --record wrote (HEARD.wav.times beside it)")
    parser.add_argument(
        "weights", help="the JSON lines --weights wrote, or the .y4m --video-record wrote"
    )
    parser.add_argument("--max-lag-ms", type=int, default=300)
    parser.add_argument("--plot", default=None, metavar="OUT.png", help="draw the timeline")
    parser.add_argument(
        "--video", default=None, metavar="V.y4m", help="with --plot: also the video's mouth"
    )


def main(args: argparse.Namespace) -> int:
    audio, rate, t0 = read_heard(args.heard)
    if str(args.weights).endswith(".y4m"):
        from loadtest.video_record import read_y4m

        lumas, arrivals = read_y4m(args.weights)
        times = np.array(arrivals, np.float64)
        jaw = video_mouth(lumas[: len(times)])
    else:
        lines = Path(args.weights).read_text().splitlines()
        frames = [json.loads(line) for line in lines if line]
        times = np.array([f["t"] for f in frames], np.float64)
        jaw = np.array([f["jawOpen"] for f in frames], np.float64)
    summary = lipsync_offset(audio, rate, t0, times, jaw, max_lag_ms=args.max_lag_ms)
    sys.stdout.write(json.dumps(summary) + "\n")
    if args.plot:
        from loadtest.avatar_plots import plot_timeline

        kind = "video" if str(args.weights).endswith(".y4m") else "jawOpen (weights)"
        curves = [(f"{kind}, {summary['offset_ms']:+d} ms", times, jaw)]
        if args.video:
            from loadtest.video_record import read_y4m

            lumas, arrivals = read_y4m(args.video)
            v_times = np.array(arrivals, np.float64)
            v_mouth = video_mouth(lumas[: len(v_times)])
            by_video = lipsync_offset(audio, rate, t0, v_times, v_mouth)
            curves.append((f"mouth in the video, {by_video['offset_ms']:+d} ms", v_times, v_mouth))
        plot_timeline(Path(args.plot), audio, rate, t0, curves)
    return 0

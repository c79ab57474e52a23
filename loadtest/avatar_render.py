"""``python -m loadtest avatar-render``: what one avatar video frame costs on this machine.

Drives the default head (or ``--model FILE.glb``) with a realistic face: lip-sync of a
speech-like phoneme sequence through :class:`~kefu.ai_bridge.avatar.face.FaceDriver` (so
blinks, gaze and a happy mood are in it too) and a slow head sway. Each size (``--sizes``,
default 512x512 and 1280x720) renders ``--frames`` frames with
:class:`~kefu.ai_bridge.avatar.render.FaceRenderer` on one thread (``--aa``: fxaa, msaa or
none), converts each to ``yuv420p`` and encodes it with PyAV twice: VP8 (libvpx, realtime
deadline, cpu-used 8, no lag) and H.264 (libx264 ultrafast, zerolatency), one thread each by
default. Prints one JSON summary: per size and stage, milliseconds per frame (p50, p95, mean)
and the encoded bytes per frame; ``--json OUT`` also writes it to a file. Run with
``LP_NUM_THREADS=1`` (the renderer sets it when unset) for what one call costs one core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["add_arguments", "main", "run", "speech_weights"]

# A speech-like stream of IPA phonemes (vowels, stops, fricatives, nasals, rounded vowels).
PHONEMES = "h ə l oʊ h aʊ k æ n aɪ h ɛ l p j u t ə d eɪ w ɪ ð ð ɪ s ɔ ɹ d ɚ s m ɑ b i f".split()


def speech_weights(frames: int, fps: float = 30.0, seed: int = 1) -> np.ndarray:
    """Frames × 52 weights: lip-sync of random phonemes in phrases with pauses, over a
    FaceDriver's blinks, gaze and a happy mood."""
    from kefu.ai_bridge.avatar.face import FaceDriver
    from kefu.ai_bridge.avatar.lipsync import speech_clip
    from kefu.ai_bridge.speak.base import PhonemeMark

    rng = np.random.default_rng(seed)
    driver = FaceDriver()
    driver.set_emotion("happy", 0.6)
    total_s = frames / fps
    at = 0.2
    while at < total_s:
        marks, ms = [], 0.0
        for _ in range(int(rng.integers(8, 24))):
            duration = float(rng.uniform(55.0, 170.0))
            marks.append(PhonemeMark(str(rng.choice(PHONEMES)), ms, duration))
            ms += duration
        driver.speak(speech_clip(marks, at, fps=fps, duration_ms=ms))
        at += ms / 1000.0 + float(rng.uniform(0.25, 0.7))
    return np.stack([driver.advance(k / fps) for k in range(frames)]).astype(np.float32)


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, np.float64)
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "mean": round(float(a.mean()), 2),
    }


def _encoder(codec: str, width: int, height: int, fps: int, threads: int) -> Any:
    import av

    ctx = av.CodecContext.create(codec, "w")
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "yuv420p"
    ctx.time_base = Fraction(1, fps)
    ctx.framerate = Fraction(fps, 1)
    ctx.bit_rate = int(1.2e6 * width * height / (640 * 480))
    ctx.thread_count = threads
    if codec == "libvpx":
        ctx.options = {"deadline": "realtime", "cpu-used": "8", "lag-in-frames": "0"}
    else:
        ctx.options = {"preset": "ultrafast", "tune": "zerolatency", "threads": str(threads)}
    return ctx


def run(
    frames: int = 150,
    sizes: tuple[tuple[int, int], ...] = ((512, 512), (1280, 720)),
    *,
    antialias: str = "fxaa",
    samples: int = 4,
    fps: int = 30,
    model: str | None = None,
    encode: bool = True,
    encoder_threads: int = 1,
) -> dict[str, Any]:
    """Render (and encode) ``frames`` frames per size; the summary described above."""
    import av

    from kefu.ai_bridge.avatar.head_gltf import load_head
    from kefu.ai_bridge.avatar.render import FaceRenderer

    os.environ.setdefault("LP_NUM_THREADS", "1")
    started = time.perf_counter()
    mesh, note = load_head(model)
    load_s = time.perf_counter() - started
    weights = speech_weights(frames + 3, float(fps))
    t = np.arange(frames + 3) / fps
    heads = np.stack([0.12 * np.sin(0.7 * t), 0.05 * np.sin(1.1 * t + 1), 0.03 * np.sin(0.5 * t)])
    summary: dict[str, Any] = {
        "frames": frames,
        "fps": fps,
        "antialias": antialias,
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "encoder_threads": encoder_threads,
        "machine": platform.processor() or platform.machine(),
        "mesh": {
            "vertices": mesh.vertex_count,
            "triangles": mesh.triangle_count,
            "load_s": round(load_s, 3),
            "note": note,
        },
        "sizes": {},
    }
    for width, height in sizes:
        renderer = FaceRenderer(mesh, width, height, antialias=antialias, samples=samples)
        encoders = (
            {
                "vp8": _encoder("libvpx", width, height, fps, encoder_threads),
                "h264": _encoder("libx264", width, height, fps, encoder_threads),
            }
            if encode
            else {}
        )
        times: dict[str, list[float]] = {"render": [], "convert": []}
        sizes_out: dict[str, int] = {name: 0 for name in encoders}
        for name in encoders:
            times[name] = []
        try:
            for k in range(frames + 3):
                t0 = time.perf_counter()
                rgb = renderer.render(weights[k], tuple(heads[:, k]))
                t1 = time.perf_counter()
                frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
                frame.pts = k
                t2 = time.perf_counter()
                warm = k >= 3
                if warm:
                    times["render"].append((t1 - t0) * 1000)
                    times["convert"].append((t2 - t1) * 1000)
                for name, ctx in encoders.items():
                    t3 = time.perf_counter()
                    packets = ctx.encode(frame)
                    if warm:
                        times[name].append((time.perf_counter() - t3) * 1000)
                        sizes_out[name] += sum(p.size for p in packets)
        finally:
            renderer.close()
        per = {stage: _stats(v) for stage, v in times.items()}
        total = sum(per[stage]["mean"] for stage in per)
        summary["sizes"][f"{width}x{height}"] = {
            "ms": per,
            "bytes_per_frame": {n: round(b / frames) for n, b in sizes_out.items()},
            "total_ms_mean": round(total, 2),
            "max_fps_one_core": round(1000.0 / total, 1) if total else None,
            "antialias": renderer.antialias,
            "msaa_samples": renderer.samples,
            "cull": renderer.cull,
        }
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frames", type=int, default=150, help="frames per size (after 3 warm)")
    parser.add_argument("--sizes", default="512x512,1280x720", help="WxH list")
    parser.add_argument("--aa", default="fxaa", choices=["fxaa", "msaa", "none"])
    parser.add_argument("--samples", type=int, default=4, help="MSAA samples with --aa msaa")
    parser.add_argument(
        "--encoder-threads", type=int, default=1, help="threads per encoder (1: one core's cost)"
    )
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--model", help="an avatar GLB instead of the default head")
    parser.add_argument("--no-encode", action="store_true", help="render and convert only")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def main(args: argparse.Namespace) -> int:
    sizes = tuple(
        (int(w), int(h)) for w, h in (s.lower().split("x") for s in args.sizes.split(","))
    )
    summary = run(
        args.frames,
        sizes,
        antialias=args.aa,
        samples=args.samples,
        fps=args.fps,
        model=args.model,
        encode=not args.no_encode,
        encoder_threads=args.encoder_threads,
    )
    text = json.dumps(summary, indent=2)
    sys.stdout.write(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0

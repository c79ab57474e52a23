"""``python -m loadtest.bench_mixer``: how long a room's mix holds a caller's audio back.

A source publishes 20 ms Opus packets in real time (optionally with arrival jitter): silence,
then a 200 ms tone, then silence. A reader takes frames from an :class:`AudioMixer` as fast
as it returns them. Measured per run: **onset lag** (the tone's first packet published → the
first mixed frame carrying it) and **offset lag** (the first silent packet after the tone →
the first quiet mixed frame), for the paced mix (a loudspeaker's: SIP legs in a room) and the
prompt mix (the AI's ear). Prints one JSON line per (jitter, mix).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from kefu.codecs.opus import OpusEncoder
from kefu.sfu.forward import PacketSource
from kefu.sfu.mixer import FRAME, AudioMixer

RATE = 48000
TONE = range(30, 40)  # packets carrying the tone
PACKETS = 60


def _rms(frame) -> float:  # noqa: ANN001 - an av.AudioFrame
    return float(np.sqrt(np.mean(frame.to_ndarray().astype(np.float64) ** 2)))


async def one_run(*, prompt: bool, jitter_s: float, seed: int) -> tuple[float, float]:
    """(onset lag, offset lag) in ms of one run."""
    rng = np.random.default_rng(seed)
    encoder = OpusEncoder(channels=1)
    t = np.arange(FRAME) / RATE
    loud = (12000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    quiet = np.zeros(FRAME, np.int16)
    source = PacketSource("caller", clock=time.monotonic)
    mixer = AudioMixer(prompt=prompt)
    mixer.add_source("caller", source)
    sent: dict[str, float] = {}
    got: dict[str, float] = {}

    async def feed() -> None:
        start = time.monotonic()
        for i in range(PACKETS):
            due = start + i * FRAME / RATE + (rng.uniform(0, jitter_s) if jitter_s else 0.0)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if i == TONE.start:
                sent["on"] = time.monotonic()
            if i == TONE.stop:
                sent["off"] = time.monotonic()
            source.publish(encoder.encode(loud if i in TONE else quiet), i * FRAME)

    feeder = asyncio.create_task(feed())
    for _ in range(PACKETS + 30):
        level = _rms(await mixer.recv())
        now = time.monotonic()
        if level > 3000 and "on" not in got:
            got["on"] = now
        if "on" in got and level < 300 and "off" not in got:
            got["off"] = now
        if "off" in got and feeder.done():
            break
    await feeder
    mixer.stop()
    return (got["on"] - sent["on"]) * 1000, (got["off"] - sent["off"]) * 1000


async def run(runs: int, jitters_ms: list[float]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for jitter in jitters_ms:
        for prompt in (False, True):
            lags = np.array(
                [await one_run(prompt=prompt, jitter_s=jitter / 1000, seed=s) for s in range(runs)]
            )
            rows.append(
                {
                    "mix": "prompt" if prompt else "paced",
                    "jitter_ms": jitter,
                    "runs": runs,
                    "onset_lag_ms": {
                        "p50": round(float(np.median(lags[:, 0])), 1),
                        "max": round(float(lags[:, 0].max()), 1),
                    },
                    "offset_lag_ms": {
                        "p50": round(float(np.median(lags[:, 1])), 1),
                        "max": round(float(lags[:, 1].max()), 1),
                    },
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_mixer")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jitter-ms", type=float, nargs="*", default=[0.0, 15.0])
    args = parser.parse_args()
    for row in asyncio.run(run(args.runs, args.jitter_ms)):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

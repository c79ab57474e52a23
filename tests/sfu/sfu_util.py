"""Helpers for the SFU tests: tone detection and resource counting."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np


def tone_strength(pcm: np.ndarray, freq: float, rate: int = 48000) -> float:
    """Share of the signal's energy within ±20 Hz of ``freq`` (0..1)."""
    if pcm.size < rate // 10:
        return 0.0
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(pcm.size, 1 / rate)
    total = spectrum.sum()
    band = spectrum[(freqs > freq - 20) & (freqs < freq + 20)].sum()
    return float(band / total) if total else 0.0


def udp_sockets() -> int:
    """UDP sockets this process holds (other processes in the namespace do not count)."""
    inodes: set[str] = set()
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        path = Path(name)
        if path.exists():
            inodes.update(line.split()[9] for line in path.read_text().splitlines()[1:])
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            count += 1
    return count


def live_tasks() -> int:
    return len([t for t in asyncio.all_tasks() if not t.done()])


async def until(predicate, within: float = 10.0, step: float = 0.05) -> None:
    """Wait for real network/media progress (not for protocol timers)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(step)

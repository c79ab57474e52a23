"""CPU during ``python -m loadtest takeover``: with ``--kefu-pid`` the CPU of kefu (the process
and its children, /proc/PID/stat) is sampled every 0.25 s, and this process's own, and reported
over each round and over the stretch when all K agents held their calls at once."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

CPU_SAMPLE_S = 0.25


def cpu_span(samples: Sequence[tuple[float, float]]) -> float | None:
    """% of one core used from the first sample to the last."""
    if len(samples) < 2:
        return None
    return cpu_between(samples, samples[0][0], samples[-1][0])


def cpu_between(samples: Sequence[tuple[float, float]], a: float, b: float) -> float | None:
    """% of one core used between UNIX times ``a`` and ``b``, from (time, cumulative CPU s)
    samples: the last sample at or before ``a`` to the first at or after ``b``."""
    before = [s for s in samples if s[0] <= a]
    after = [s for s in samples if s[0] >= b]
    if not before or not after:
        return None
    (t0, c0), (t1, c1) = before[-1], after[0]
    return round(100.0 * (c1 - c0) / (t1 - t0), 1) if t1 > t0 else None


class CpuSampler:
    """Cumulative CPU seconds of kefu's process tree and of this process, every 0.25 s."""

    def __init__(self, kefu_pid: int | None) -> None:
        self.kefu_pid = kefu_pid
        self.kefu: list[tuple[float, float]] = []
        self.own: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        from loadtest.kefu_process import cpu_seconds, process_tree

        now = time.time()
        own = os.times()
        self.own.append((now, own.user + own.system))
        if self.kefu_pid is None:
            return
        total = 0.0
        for pid in process_tree(self.kefu_pid):
            try:
                total += cpu_seconds(pid)
            except OSError:
                continue
        self.kefu.append((now, total))

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(CPU_SAMPLE_S)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self.sample()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

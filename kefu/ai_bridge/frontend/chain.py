"""The caller-side front end as one per-call object: echo cancellation, then denoising.

An instance is the optional ``frontend`` hook of :class:`kefu.ai_bridge.tracks.CallerAudioTap`:
it is awaited with each 16 kHz chunk the tap produces and returns the cleaned audio (possibly
a little less or more, since both stages work in whole frames). AEC runs first because the
denoiser is non-linear and would break the echo path the adaptive filter models.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.frontend.aec import EchoCanceller
from kefu.ai_bridge.frontend.denoise import Denoiser

__all__ = ["CallerFrontEnd"]

TAP_RATE = 16000


class CallerFrontEnd:
    """Per-call chain over 16 kHz int16 audio; either stage may be None (off)."""

    def __init__(
        self, *, denoiser: Denoiser | None = None, echo: EchoCanceller | None = None
    ) -> None:
        if denoiser is not None and (denoiser.in_rate, denoiser.out_rate) != (TAP_RATE, TAP_RATE):
            raise ValueError("the tap's front end denoises 16 kHz in, 16 kHz out")
        if echo is not None and echo.sample_rate != TAP_RATE:
            raise ValueError("the tap's echo canceller runs at 16 kHz")
        self.denoiser = denoiser
        self.echo = echo
        # One worker: both stages keep per-call state that must see chunks in order.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="frontend")

    @property
    def ready(self) -> bool:
        stages = [s for s in (self.denoiser, self.echo) if s is not None]
        return all(s.ready for s in stages)

    @property
    def error(self) -> str | None:
        errors = [s.error for s in (self.denoiser, self.echo) if s is not None and s.error]
        return "; ".join(errors) if errors else None

    def push_far(self, pcm: NDArray[np.int16], sample_rate: int) -> None:
        """The bot's audio as it is sent (feeds the echo canceller's far end)."""
        if self.echo is not None:
            self.echo.push_far(pcm, sample_rate)

    def process(self, pcm16k: NDArray[np.int16]) -> NDArray[np.int16]:
        """Blocking form (tests, benchmarks)."""
        out = pcm16k
        if self.echo is not None:
            out = self.echo.process(out)
        if self.denoiser is not None and out.size:
            out = self.denoiser.process(out)
        return out

    async def __call__(self, pcm16k: NDArray[np.int16]) -> NDArray[np.int16]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.process, pcm16k)

    def close(self) -> None:
        if self.denoiser is not None:
            self.denoiser.close()
        self._executor.shutdown(wait=False)

"""Acoustic/line echo cancellation for SIP legs with speexdsp, using the bot's own audio.

On a phone leg the bot hears itself: hybrids and handsets return an attenuated, delayed copy of
what kefu sent, which trips barge-in and pollutes the transcript. The far end (what the bot
played) is known exactly, so speex's adaptive filter can subtract it from the near end (what
the caller's leg delivers).

Far audio is pushed when it goes out (any rate; resampled to the canceller's) and queued in a
bounded FIFO; every near frame takes the same number of far samples from it, zeros when the bot
is silent. The FIFO therefore holds the far→near delay that has not yet come back; the adaptive
filter covers the rest (``tail_ms``). Far audio pushed faster than near audio arrives (a burst)
beyond ``max_delay_ms`` is dropped oldest-first and counted.

``speexdsp`` is imported lazily: without it ``ready`` is False, ``error`` says why and
:meth:`EchoCanceller.process` passes the near end through.
"""

from __future__ import annotations

import importlib
import threading
from collections import deque
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.codecs.resample import resample

__all__ = ["EchoCanceller", "erle_db"]

log = structlog.get_logger(__name__)

_RATES = (8000, 16000)


def erle_db(near: NDArray[np.int16], out: NDArray[np.int16]) -> float:
    """Echo return loss enhancement: energy removed from an echo-only near signal, in dB."""
    e_in = float(np.sum(np.asarray(near, np.float64) ** 2))
    e_out = float(np.sum(np.asarray(out, np.float64) ** 2))
    return 10.0 * float(np.log10(max(e_in, 1.0) / max(e_out, 1.0)))


class EchoCanceller:
    """One leg's canceller: near (caller) and far (bot) int16 mono at 8 or 16 kHz."""

    def __init__(
        self,
        sample_rate: int = 8000,
        *,
        frame_ms: int = 20,
        tail_ms: int = 200,
        max_delay_ms: int = 500,
        module: str = "speexdsp",
        call_id: str | None = None,
    ) -> None:
        if sample_rate not in _RATES:
            raise ValueError(f"echo canceller runs at 8 or 16 kHz, not {sample_rate}")
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_ms // 1000
        self.tail_samples = sample_rate * tail_ms // 1000
        self.max_delay_samples = sample_rate * max_delay_ms // 1000
        self.ready = False
        self.error: str | None = None
        self.frames = 0
        """Near frames run through the filter."""
        self.far_dropped = 0
        """Far samples dropped because the FIFO was full (far pushed ahead of the near end)."""
        self.far_missing = 0
        """Far samples replaced by silence because none were queued."""
        self._log = log.bind(call_id=call_id)
        # push_far runs on the event loop while process may run in an executor thread.
        self._far_lock = threading.Lock()
        self._far: deque[NDArray[np.int16]] = deque()
        self._far_len = 0
        self._near_pending = np.zeros(0, np.int16)
        self._aec: Any = None
        try:
            mod = importlib.import_module(module)
            self._aec = mod.EchoCanceller.create(self.frame_samples, self.tail_samples, sample_rate)
            self.ready = True
        except Exception as exc:  # no libspeexdsp: run without AEC rather than fail the call
            self.error = f"echo canceller unavailable: {exc}"
            self._log.error("aec_load_failed", error=self.error)

    @property
    def far_queued(self) -> int:
        return self._far_len

    def push_far(self, pcm: NDArray[np.int16], sample_rate: int | None = None) -> None:
        """Queue audio the bot just sent (at ``sample_rate``, default the canceller's)."""
        data = np.asarray(pcm, np.int16).reshape(-1)
        if sample_rate is not None and sample_rate != self.sample_rate and data.size:
            data = resample(data, sample_rate, self.sample_rate)
        if not data.size:
            return
        with self._far_lock:
            self._push_locked(data)

    def _push_locked(self, data: NDArray[np.int16]) -> None:
        self._far.append(data)
        self._far_len += len(data)
        excess = self._far_len - self.max_delay_samples
        while excess > 0 and self._far:
            head = self._far[0]
            if len(head) <= excess:
                self._far.popleft()
                cut = len(head)
            else:
                self._far[0] = head[excess:]
                cut = excess
            self._far_len -= cut
            self.far_dropped += cut
            excess -= cut

    def _take_far(self, n: int) -> NDArray[np.int16]:
        out = np.zeros(n, np.int16)
        filled = 0
        while filled < n and self._far:
            head = self._far[0]
            k = min(n - filled, len(head))
            out[filled : filled + k] = head[:k]
            filled += k
            if k == len(head):
                self._far.popleft()
            else:
                self._far[0] = head[k:]
        self._far_len -= filled
        self.far_missing += n - filled
        return out

    def process(self, near: NDArray[np.int16]) -> NDArray[np.int16]:
        """Cancel echo from near audio (any chunk size); returns whole frames processed."""
        data = np.asarray(near, np.int16).reshape(-1)
        if self._aec is None:
            return data.copy()
        pending = np.concatenate((self._near_pending, data)) if self._near_pending.size else data
        n = self.frame_samples
        whole = len(pending) // n * n
        outs = []
        for i in range(0, whole, n):
            frame = np.ascontiguousarray(pending[i : i + n], dtype="<i2")
            with self._far_lock:
                far_pcm = self._take_far(n)
            far = np.ascontiguousarray(far_pcm, dtype="<i2")
            cleaned = self._aec.process(frame.tobytes(), far.tobytes())
            outs.append(np.frombuffer(cleaned, dtype="<i2").astype(np.int16))
            self.frames += 1
        self._near_pending = pending[whole:].copy()
        return np.concatenate(outs) if outs else np.zeros(0, np.int16)

    def reset_far(self) -> None:
        """Forget queued far audio (barge-in flushed the bot's queue before it was played)."""
        with self._far_lock:
            self._far.clear()
            self._far_len = 0

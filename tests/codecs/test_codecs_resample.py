"""Stream resampler pacing and whole-buffer resampling."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from kefu.codecs.resample import StreamResampler, resample


def tone(rate: int, seconds: float, hz: float = 440.0) -> NDArray[np.int16]:
    t = np.arange(int(rate * seconds)) / rate
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def dominant_hz(pcm: NDArray[np.int16], rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    return float(np.argmax(spectrum) * rate / len(pcm))


@pytest.mark.parametrize(
    ("src", "dst"), [(48000, 8000), (8000, 48000), (16000, 48000), (48000, 16000)]
)
def test_stream_emits_exact_frames_one_per_input_frame(src: int, dst: int) -> None:
    r = StreamResampler(src, dst)
    pcm = tone(src, 1.0)
    step = src // 50
    counts = [len(r.process(pcm[i : i + step])) for i in range(0, len(pcm), step)]
    out = r.process(np.zeros(0, np.int16))
    assert out == []
    # after the filter's start-up every 20 ms in gives exactly 20 ms out: no bursts
    assert set(counts[2:]) == {1}
    assert sum(counts) >= 49
    frames = [f for f in r.process(pcm[:step])]
    assert all(f.shape == (dst // 50,) and f.dtype == np.int16 for f in frames)


def test_stream_preserves_the_tone() -> None:
    r = StreamResampler(48000, 8000)
    pcm = tone(48000, 1.0)
    frames: list[NDArray[np.int16]] = []
    for i in range(0, len(pcm), 960):
        frames += r.process(pcm[i : i + 960])
    out = np.concatenate(frames)
    assert abs(dominant_hz(out[800:], 8000) - 440) < 10
    assert np.abs(out[800:]).max() > 7000


def test_stream_handles_odd_chunk_sizes() -> None:
    r = StreamResampler(8000, 16000, frame_ms=10)
    pcm = tone(8000, 0.5)
    frames: list[NDArray[np.int16]] = []
    for size in (1, 7, 333, 1000, 2659):
        frames += r.process(pcm[:size])
    assert all(len(f) == 160 for f in frames)


def test_same_rate_just_reframes() -> None:
    r = StreamResampler(16000, 16000)
    pcm = np.arange(1000, dtype=np.int16)
    frames = r.process(pcm[:500]) + r.process(pcm[500:])
    assert len(frames) == 3
    assert np.array_equal(np.concatenate(frames), pcm[:960])


def test_bad_setup_rejected() -> None:
    with pytest.raises(ValueError):
        StreamResampler(8000, 0)
    with pytest.raises(ValueError):
        StreamResampler(8000, 11025, frame_ms=1)


def test_whole_buffer_resample() -> None:
    pcm = tone(8000, 1.0)
    up = resample(pcm, 8000, 48000)
    assert up.dtype == np.int16 and len(up) == 48000
    assert abs(dominant_hz(up, 48000) - 440) < 2
    same = resample(pcm, 8000, 8000)
    assert np.array_equal(same, pcm) and same is not pcm

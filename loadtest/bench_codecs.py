"""Cost per 20 ms frame of kefu's codecs, resamplers and jitter buffer.

Run: python3 -m pytest loadtest/bench_codecs.py --benchmark-enable -p no:cacheprovider
Each benchmark processes exactly one 20 ms frame per call, so "mean" is µs per frame.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.typing import NDArray

from kefu.codecs.jitter import JitterBuffer
from kefu.codecs.registry import SUPPORTED_AUDIO, codec_info, make_decoder, make_encoder
from kefu.codecs.resample import StreamResampler


def speech_like(rate: int, frames: int) -> list[NDArray[np.int16]]:
    """Voiced-sound stand-in (harmonics of 140 Hz plus noise), cut into 20 ms frames."""
    rng = np.random.default_rng(1)
    n = rate // 50 * frames
    t = np.arange(n) / rate
    x = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 12))
    x = 3000 * x + rng.normal(0, 300, n)
    pcm = np.clip(x, -32768, 32767).astype(np.int16)
    return list(pcm.reshape(frames, -1))


@pytest.mark.parametrize("name", SUPPORTED_AUDIO)
def test_encode(benchmark, name: str) -> None:  # type: ignore[no-untyped-def]
    info = codec_info(name)
    encoder = make_encoder(name)
    frames = itertools.cycle(speech_like(info.sample_rate, 50))
    benchmark(lambda: encoder.encode(next(frames)))


@pytest.mark.parametrize("name", SUPPORTED_AUDIO)
def test_decode(benchmark, name: str) -> None:  # type: ignore[no-untyped-def]
    info = codec_info(name)
    encoder, decoder = make_encoder(name), make_decoder(name)
    payloads = itertools.cycle([encoder.encode(f) for f in speech_like(info.sample_rate, 50)])
    benchmark(lambda: decoder.decode(next(payloads)))


@pytest.mark.parametrize("name", SUPPORTED_AUDIO)
def test_conceal(benchmark, name: str) -> None:  # type: ignore[no-untyped-def]
    info = codec_info(name)
    encoder, decoder = make_encoder(name), make_decoder(name)
    payloads = [encoder.encode(f) for f in speech_like(info.sample_rate, 50)]
    samples = info.frame_samples()
    cycle = itertools.cycle(payloads)

    def lose_one_in_two() -> None:
        # a concealment always follows a good frame, as after an isolated loss
        decoder.decode(next(cycle))
        decoder.conceal(samples)

    benchmark(lose_one_in_two)


@pytest.mark.parametrize(("src", "dst"), [(48000, 8000), (8000, 48000), (48000, 16000)])
def test_stream_resampler(benchmark, src: int, dst: int) -> None:  # type: ignore[no-untyped-def]
    resampler = StreamResampler(src, dst)
    frames = itertools.cycle(speech_like(src, 50))
    benchmark(lambda: resampler.process(next(frames)))


def test_jitter_put_pop(benchmark) -> None:  # type: ignore[no-untyped-def]
    jb = JitterBuffer(8000, 160)
    counter = itertools.count()
    payload = bytes(160)

    def one_frame() -> None:
        n = next(counter)
        now = n * 0.02
        jb.put(n & 0xFFFF, (n * 160) & 0xFFFFFFFF, payload, now + 0.004)
        jb.pop(now + 0.005)

    benchmark(one_frame)

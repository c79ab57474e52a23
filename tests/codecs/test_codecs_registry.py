"""Codec lookup by SDP name and the encoder/decoder factories."""

from __future__ import annotations

import numpy as np
import pytest

from kefu.codecs.registry import (
    SUPPORTED_AUDIO,
    CodecInfo,
    Decoder,
    Encoder,
    codec_info,
    make_decoder,
    make_encoder,
)
from kefu.errors import CodecError


@pytest.mark.parametrize(
    ("name", "clock", "rate", "channels", "pt", "samples", "step"),
    [
        ("PCMU", 8000, 8000, 1, 0, 160, 160),
        ("PCMA", 8000, 8000, 1, 8, 160, 160),
        ("G722", 8000, 16000, 1, 9, 320, 160),
        ("opus", 48000, 48000, 2, None, 960, 960),
        ("telephone-event", 8000, 8000, 1, None, 160, 160),
    ],
)
def test_codec_table(
    name: str, clock: int, rate: int, channels: int, pt: int | None, samples: int, step: int
) -> None:
    info = codec_info(name)
    assert info == CodecInfo(name, clock, rate, channels, pt)
    assert info.frame_samples() == samples
    assert info.rtp_timestamp_step() == step
    assert info.rtp_timestamp_step(40) == 2 * step


@pytest.mark.parametrize("spelling", ["pcmu", "Opus", "g722", "TELEPHONE-EVENT"])
def test_lookup_ignores_case(spelling: str) -> None:
    assert codec_info(spelling).name.casefold() == spelling.casefold()


def test_unknown_codec() -> None:
    with pytest.raises(CodecError, match="unsupported codec 'GSM'"):
        codec_info("GSM")
    with pytest.raises(CodecError):
        make_encoder("telephone-event")
    with pytest.raises(CodecError):
        make_decoder("telephone-event")


def test_preference_order() -> None:
    assert SUPPORTED_AUDIO == ("opus", "G722", "PCMU", "PCMA")


@pytest.mark.parametrize("name", SUPPORTED_AUDIO)
def test_every_supported_codec_round_trips_one_frame(name: str) -> None:
    encoder: Encoder = make_encoder(name)
    decoder: Decoder = make_decoder(name)
    assert encoder.info == decoder.info == codec_info(name)
    frame = encoder.info.frame_samples()
    t = np.arange(frame) / encoder.info.sample_rate
    pcm = (3000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    payload = encoder.encode(pcm)
    assert isinstance(payload, bytes) and payload
    out = decoder.decode(payload)
    assert out.dtype == np.int16 and out.shape == (frame,)
    lost = decoder.conceal(frame)
    assert lost.dtype == np.int16 and lost.shape == (frame,)


def test_encoder_options_pass_through() -> None:
    assert len(make_encoder("PCMU", ptime_ms=30).encode(np.zeros(240, np.int16))) == 240
    opus = make_encoder("opus", bitrate=64000, channels=2, ptime_ms=10)
    assert opus.encode(np.zeros((480, 2), np.int16))

"""Round trips through the PyAV codecs: lengths, fidelity, concealment, bad payloads."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from kefu.codecs.g722 import G722Decoder, G722Encoder
from kefu.codecs.info import FrameSizeError
from kefu.codecs.opus import OpusDecoder, OpusEncoder
from kefu.errors import CodecError


def tone(
    rate: int, seconds: float, hz: float = 440.0, amplitude: float = 8000.0
) -> NDArray[np.int16]:
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def aligned_snr_db(reference: NDArray[np.int16], decoded: NDArray[np.int16], max_lag: int) -> float:
    """SNR after shifting ``decoded`` by the codec delay that best matches ``reference``."""
    ref = reference.astype(np.float64)
    out = decoded.astype(np.float64)
    n = len(ref) - max_lag
    best = -np.inf
    for lag in range(max_lag):
        seg = out[lag : lag + n]
        noise = ref[:n] - seg
        snr = 10 * np.log10(np.sum(ref[:n] ** 2) / max(np.sum(noise**2), 1e-9))
        best = max(best, snr)
    return float(best)


def test_g722_round_trip_sizes_and_fidelity() -> None:
    pcm = tone(16000, 1.0)
    enc, dec = G722Encoder(), G722Decoder()
    packets = [enc.encode(pcm[i : i + 320]) for i in range(0, len(pcm), 320)]
    assert len(packets) == 50
    assert {len(p) for p in packets} == {160}
    out = [dec.decode(p) for p in packets]
    assert {o.shape for o in out} == {(320,)}
    assert all(o.dtype == np.int16 for o in out)
    decoded = np.concatenate(out)
    # skip the ADPCM start-up; G.722 at 64 kbit/s reproduces a pure tone very well
    assert aligned_snr_db(pcm[1600:], decoded[1600:], max_lag=64) > 40.0


def test_g722_other_ptime_and_wrong_frame() -> None:
    enc = G722Encoder(ptime_ms=10)
    assert len(enc.encode(np.zeros(160, np.int16))) == 80
    with pytest.raises(FrameSizeError):
        G722Encoder().encode(np.zeros(321, np.int16))


def test_g722_concealment_continues_the_tone_then_fades() -> None:
    pcm = tone(16000, 0.5, hz=250.0)
    enc, dec = G722Encoder(), G722Decoder()
    for i in range(0, len(pcm), 320):
        dec.decode(enc.encode(pcm[i : i + 320]))
    first = dec.conceal(320)
    assert len(first) == 320 and np.abs(first).max() > 4000
    rest = [dec.conceal(320) for _ in range(3)]
    assert np.abs(rest[-1]).max() == 0  # silent from 60 ms into the erasure


def test_g722_any_bytes_decode_empty_is_empty() -> None:
    dec = G722Decoder()
    assert dec.decode(b"\x00\xff" * 80).shape == (320,)
    assert dec.decode(b"").shape == (0,)


@pytest.mark.parametrize("channels", [1, 2])
def test_opus_round_trip(channels: int) -> None:
    pcm = tone(48000, 1.0)
    enc, dec = OpusEncoder(channels=channels, bitrate=32000 * channels), OpusDecoder()
    frames = [pcm[i : i + 960] for i in range(0, len(pcm), 960)]
    if channels == 2:
        frames = [np.stack([f, f], axis=1) for f in frames]
    packets = [enc.encode(f) for f in frames]
    assert len(packets) == 50 and all(packets)
    # 32 kbit/s mono -> about 80 bytes per 20 ms; VBR leaves room
    assert np.mean([len(p) for p in packets[5:]]) < 4000 * channels / 50 * 2
    out = [dec.decode(p) for p in packets]
    assert {o.shape for o in out} == {(960,)}
    decoded = np.concatenate(out)
    # Opus is perceptual; a clean tone still comes back at > 15 dB SNR once aligned
    assert aligned_snr_db(pcm[4800:], decoded[4800:], max_lag=960) > 15.0


def test_opus_mono_input_to_stereo_encoder_is_duplicated() -> None:
    enc = OpusEncoder(channels=2)
    assert enc.encode(np.zeros(960, np.int16))
    with pytest.raises(FrameSizeError):
        enc.encode(np.zeros((960, 3), np.int16))
    with pytest.raises(FrameSizeError):
        OpusEncoder().encode(np.zeros(480, np.int16))


def test_opus_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        OpusEncoder(ptime_ms=15)
    with pytest.raises(ValueError):
        OpusEncoder(channels=3)
    with pytest.raises(ValueError):
        OpusEncoder(bitrate=1000)


def test_opus_plc_continues_the_signal() -> None:
    pcm = tone(48000, 0.4, hz=300.0)
    enc, dec = OpusEncoder(), OpusDecoder()
    for i in range(0, len(pcm), 960):
        dec.decode(enc.encode(pcm[i : i + 960]))
    concealed = dec.conceal(960)
    assert concealed.shape == (960,) and concealed.dtype == np.int16
    assert np.abs(concealed).max() > 2000  # libopus PLC, not silence
    assert dec.conceal(1920).shape == (1920,)
    assert dec.conceal(480).shape == (480,)


def test_opus_conceal_before_any_packet_is_silence() -> None:
    assert not OpusDecoder().conceal(960).any()


@pytest.mark.parametrize("payload", [b"", b"\xff\xff\xff garbage", b"\x03"])
def test_opus_corrupt_payload_raises_codec_error(payload: bytes) -> None:
    dec = OpusDecoder()
    with pytest.raises(CodecError):
        dec.decode(payload)


def test_opus_decoder_survives_a_corrupt_payload() -> None:
    enc, dec = OpusEncoder(), OpusDecoder()
    pcm = tone(48000, 0.1)
    packets = [enc.encode(pcm[i : i + 960]) for i in range(0, len(pcm), 960)]
    dec.decode(packets[0])
    with pytest.raises(CodecError):
        dec.decode(b"\xff\xff\xff garbage")
    assert dec.decode(packets[1]).shape == (960,)

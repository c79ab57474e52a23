"""G.711 tables checked bit-exactly against a scalar reference of the classic algorithm."""

from __future__ import annotations

import numpy as np
import pytest

from kefu.codecs.g711 import (
    G711Decoder,
    G711Encoder,
    alaw_decode,
    alaw_encode,
    ulaw_decode,
    ulaw_encode,
)
from kefu.codecs.info import FrameSizeError

# --- reference: the Sun Microsystems g711.c way, one sample at a time ---------------------

SEG_UEND = (0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF)
SEG_AEND = (0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF)


def search(value: int, table: tuple[int, ...]) -> int:
    for i, end in enumerate(table):
        if value <= end:
            return i
    return len(table)


def ref_linear2ulaw(pcm: int) -> int:
    pcm >>= 2
    if pcm < 0:
        pcm = -pcm
        mask = 0x7F
    else:
        mask = 0xFF
    pcm = min(pcm, 8159) + (0x84 >> 2)
    seg = search(pcm, SEG_UEND)
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (seg + 1)) & 0xF)) ^ mask


def ref_ulaw2linear(code: int) -> int:
    code = ~code & 0xFF
    t = ((code & 0x0F) << 3) + 0x84
    t <<= (code & 0x70) >> 4
    return 0x84 - t if code & 0x80 else t - 0x84


def ref_linear2alaw(pcm: int) -> int:
    pcm >>= 3
    if pcm >= 0:
        mask = 0xD5
    else:
        mask = 0x55
        pcm = -pcm - 1
    seg = search(pcm, SEG_AEND)
    if seg >= 8:
        return 0x7F ^ mask
    aval = seg << 4
    aval |= (pcm >> 1) & 0xF if seg < 2 else (pcm >> seg) & 0xF
    return aval ^ mask


def ref_alaw2linear(code: int) -> int:
    code ^= 0x55
    t = (code & 0x0F) << 4
    seg = (code & 0x70) >> 4
    if seg == 0:
        t += 8
    elif seg == 1:
        t += 0x108
    else:
        t = (t + 0x108) << (seg - 1)
    return t if code & 0x80 else -t


ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
ALL_CODES = bytes(range(256))


def test_ulaw_encode_every_int16_matches_reference() -> None:
    expected = bytes(ref_linear2ulaw(int(x)) for x in ALL_SAMPLES)
    assert ulaw_encode(ALL_SAMPLES) == expected


def test_alaw_encode_every_int16_matches_reference() -> None:
    expected = bytes(ref_linear2alaw(int(x)) for x in ALL_SAMPLES)
    assert alaw_encode(ALL_SAMPLES) == expected


def test_ulaw_decode_every_code_matches_reference() -> None:
    assert ulaw_decode(ALL_CODES).tolist() == [ref_ulaw2linear(c) for c in ALL_CODES]


def test_alaw_decode_every_code_matches_reference() -> None:
    assert alaw_decode(ALL_CODES).tolist() == [ref_alaw2linear(c) for c in ALL_CODES]


@pytest.mark.parametrize(
    ("sample", "code"),
    [(0, 0xFF), (32767, 0x80), (-32768, 0x00), (-32124, 0x00), (32124, 0x80), (1000, 0xCE)],
)
def test_ulaw_encode_anchors(sample: int, code: int) -> None:
    assert ulaw_encode(np.array([sample], np.int16)) == bytes([code])


@pytest.mark.parametrize(
    ("code", "sample"),
    [(0x00, -32124), (0x80, 32124), (0xFF, 0), (0x7F, 0), (0xFE, 8), (0x7E, -8), (0xCE, 988)],
)
def test_ulaw_decode_anchors(code: int, sample: int) -> None:
    assert ulaw_decode(bytes([code]))[0] == sample


@pytest.mark.parametrize(
    ("sample", "code"),
    [(0, 0xD5), (-1, 0x55), (32767, 0xAA), (-32768, 0x2A), (1000, 0xFA)],
)
def test_alaw_encode_anchors(sample: int, code: int) -> None:
    assert alaw_encode(np.array([sample], np.int16)) == bytes([code])


@pytest.mark.parametrize(
    ("code", "sample"),
    [(0xD5, 8), (0x55, -8), (0xAA, 32256), (0x2A, -32256), (0xFA, 1008)],
)
def test_alaw_decode_anchors(code: int, sample: int) -> None:
    assert alaw_decode(bytes([code]))[0] == sample


@pytest.mark.parametrize(
    ("encode", "decode"), [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)]
)
def test_decoded_codes_are_fixed_points(encode, decode) -> None:  # type: ignore[no-untyped-def]
    # every reconstruction level must encode back to its own code (no ±0 ambiguity aside)
    levels = decode(ALL_CODES)
    again = decode(encode(levels))
    assert np.array_equal(again, levels)


def test_quantisation_error_is_within_half_a_step() -> None:
    x = ALL_SAMPLES[::7]
    for encode, decode in ((ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)):
        err = np.abs(decode(encode(x)).astype(np.int32) - x.astype(np.int32))
        # the top segment's step is 1024 (µ-law) / 1024 (A-law)
        assert err.max() <= 1024
        small = np.abs(x.astype(np.int32)) < 256
        assert err[small].max() <= 16


def test_encode_rejects_non_int16() -> None:
    with pytest.raises(TypeError):
        ulaw_encode(np.zeros(4, np.int32))  # type: ignore[arg-type]


def test_encoder_requires_one_frame() -> None:
    enc = G711Encoder("pcmu")
    assert len(enc.encode(np.zeros(160, np.int16))) == 160
    with pytest.raises(FrameSizeError):
        enc.encode(np.zeros(159, np.int16))
    assert len(G711Encoder("PCMA", ptime_ms=30).encode(np.zeros(240, np.int16))) == 240


def test_decoder_round_trip_and_concealment() -> None:
    t = np.arange(1600) / 8000
    tone = (8000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16)
    enc, dec = G711Encoder("PCMA"), G711Decoder("PCMA")
    out = [dec.decode(enc.encode(tone[i : i + 160])) for i in range(0, 800, 160)]
    assert all(len(o) == 160 for o in out)
    concealed = dec.conceal(160)
    assert concealed.dtype == np.int16 and len(concealed) == 160
    # a 200 Hz tone is perfectly periodic: the repetition continues it closely
    assert np.corrcoef(concealed.astype(float), tone[800:960].astype(float))[0, 1] > 0.95
    assert len(dec.decode(b"")) == 0

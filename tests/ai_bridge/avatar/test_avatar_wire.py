"""The 60-byte weights frame and the JSON form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, INDEX, pose_vector
from kefu.ai_bridge.avatar.wire import (
    FRAME_BYTES,
    MAGIC_VERSION,
    FrameEncoder,
    FrameFlags,
    WeightsFrameError,
    decode_frame,
    dequantize,
    encode_frame,
    frame_to_json,
    quantize,
    sequence_distance,
    weights_from_json,
    weights_to_json,
)
from kefu.errors import RemoteError

EXAMPLE_POSE = {
    "eyeBlinkLeft": 1.0,
    "eyeBlinkRight": 1.0,
    "jawOpen": 0.65,
    "mouthLowerDownLeft": 0.4,
    "mouthLowerDownRight": 0.4,
    "mouthSmileLeft": 0.2,
    "mouthSmileRight": 0.2,
}
EXAMPLE_DUMP = """\
0000  a1 01 01 02 00 12 d6 87 ff 00 00 00 00 00 00 ff
0010  00 00 00 00 00 00 00 00 00 a6 00 00 00 00 00 33
0020  33 00 00 00 00 00 00 00 00 00 00 00 00 66 66 00
0030  00 00 00 00 00 00 00 00 00 00 00 00"""
DOC = Path(__file__).resolve().parents[3] / "docs" / "avatar.md"


def dump(frame: bytes) -> str:
    rows = [frame[i : i + 16] for i in range(0, len(frame), 16)]
    lines = [f"{16 * n:04x}  " + " ".join(f"{b:02x}" for b in row) for n, row in enumerate(rows)]
    return "\n".join(lines)


def example() -> bytes:
    return encode_frame(
        pose_vector(EXAMPLE_POSE), sequence=258, timestamp_ms=1234567, flags=FrameFlags.SPEAKING
    )


def test_frame_layout_byte_by_byte() -> None:
    frame = example()
    assert FRAME_BYTES == 60 and len(frame) == 60
    assert frame[0] == MAGIC_VERSION == 0xA1
    assert frame[1] == 0x01  # speaking
    assert frame[2:4] == bytes([0x01, 0x02])  # sequence 258, big-endian
    assert frame[4:8] == (1234567).to_bytes(4, "big")
    assert frame[8 + INDEX["jawOpen"]] == 166  # round(0.65 * 255)
    assert frame[8 + INDEX["mouthSmileLeft"]] == 51
    assert frame[8 + INDEX["eyeBlinkRight"]] == 255
    assert sum(1 for b in frame[8:] if b) == len(EXAMPLE_POSE)
    assert dump(frame) == EXAMPLE_DUMP


def test_the_documented_hex_dump_is_what_the_encoder_writes() -> None:
    assert EXAMPLE_DUMP in DOC.read_text(encoding="utf-8")


def test_round_trip_within_one_quantisation_step() -> None:
    rng = np.random.default_rng(1)
    for n in range(300):
        weights = rng.random(52).astype(np.float32)
        weights[rng.random(52) < 0.3] = 0.0
        weights[rng.random(52) < 0.05] = 1.0
        flags = FrameFlags(int(rng.integers(0, 8)))
        frame = decode_frame(encode_frame(weights, sequence=n, timestamp_ms=33 * n, flags=flags))
        assert (frame.sequence, frame.timestamp_ms, frame.flags) == (n, 33 * n, flags)
        assert frame.weights.dtype == np.float32 and frame.weights.shape == (52,)
        error = np.abs(frame.weights.astype(np.float64) - weights)
        assert error.max() <= 0.5 / 255 + 1e-6  # nearest level: half a step at most
        assert frame.weights[weights == 0.0].max(initial=0.0) == 0.0  # rest stays exact
        assert frame.weights[weights == 1.0].min(initial=1.0) == 1.0


def test_quantisation_levels() -> None:
    weights = np.zeros(52, np.float32)
    weights[:5] = [0.0, 1 / 255, 0.5, 1.0, 0.998]
    levels = quantize(weights)
    assert levels.dtype == np.uint8 and levels[:5].tolist() == [0, 1, 128, 255, 254]
    assert dequantize(levels)[:4].tolist() == pytest.approx([0.0, 1 / 255, 128 / 255, 1.0])
    over = np.full(52, 1.2, np.float32)
    over[0] = -0.5
    assert quantize(over)[:2].tolist() == [0, 255]  # clipped, not wrapped


def test_sequence_and_timestamp_wrap() -> None:
    frame = decode_frame(encode_frame(np.zeros(52), sequence=65536 + 7, timestamp_ms=2**32 + 9))
    assert (frame.sequence, frame.timestamp_ms) == (7, 9)
    encoder = FrameEncoder()
    encoder.sequence = 65535
    a = decode_frame(encoder.encode(np.zeros(52), 100))
    b = decode_frame(encoder.encode(np.zeros(52), 133))
    assert (a.sequence, b.sequence) == (65535, 0)
    assert sequence_distance(a.sequence, b.sequence) == 1
    assert sequence_distance(10, 13) == 3  # two frames lost
    assert sequence_distance(13, 10) == -3  # late
    assert sequence_distance(0, 65535) == -1
    assert sequence_distance(5, 5) == 0


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda f: f[:-1], "length"),
        (lambda f: f + b"\x00", "length"),
        (lambda f: b"", "length"),
        (lambda f: b"\xb1" + f[1:], "magic"),
        (lambda f: b"\x7b" + f[1:], "magic"),  # a JSON "{" is not a frame
        (lambda f: b"\xa2" + f[1:], "version"),
        (lambda f: b"\xa0" + f[1:], "version"),
        (lambda f: f[:1] + b"\x08" + f[2:], "flags"),
        (lambda f: f[:1] + b"\x81" + f[2:], "flags"),
    ],
)
def test_malformed_frames_are_rejected(mutate, reason: str) -> None:
    with pytest.raises(WeightsFrameError) as caught:
        decode_frame(mutate(example()))
    assert caught.value.reason == reason
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, RemoteError)


def test_decode_accepts_any_bytes_like() -> None:
    frame = example()
    for data in (frame, bytearray(frame), memoryview(frame)):
        assert decode_frame(data).sequence == 258


def test_encode_rejects_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="52"):
        encode_frame(np.zeros(51), sequence=0, timestamp_ms=0)
    with pytest.raises(ValueError, match="52"):
        encode_frame(np.zeros((2, 52)), sequence=0, timestamp_ms=0)
    nan = np.zeros(52)
    nan[3] = np.nan
    with pytest.raises(ValueError, match="finite"):
        encode_frame(nan, sequence=0, timestamp_ms=0)
    with pytest.raises(ValueError, match="flag"):
        encode_frame(np.zeros(52), sequence=0, timestamp_ms=0, flags=FrameFlags(0x10))


def test_json_form_names_all_52_in_order() -> None:
    weights = pose_vector(EXAMPLE_POSE)
    as_json = weights_to_json(weights)
    assert list(as_json) == list(BLENDSHAPES)
    assert as_json["jawOpen"] == 0.65 and as_json["tongueOut"] == 0.0
    back = weights_from_json(json.loads(json.dumps(as_json)))
    np.testing.assert_allclose(back, weights, atol=5e-5)
    sparse = weights_from_json({"jawOpen": 0.5, "eyeBlinkLeft": 1})
    assert np.flatnonzero(sparse).tolist() == [0, 17]
    decoded = frame_to_json(decode_frame(example()))
    assert decoded["seq"] == 258 and decoded["ts_ms"] == 1234567
    assert decoded["flags"] == ["speaking"]
    assert decoded["weights"]["jawOpen"] == pytest.approx(166 / 255, abs=1e-4)  # type: ignore[index]


@pytest.mark.parametrize(
    "bad",
    [
        {"jawOpn": 0.5},
        {"jawOpen": "0.5"},
        {"jawOpen": True},
        {"jawOpen": 1.5},
        {"jawOpen": -0.1},
        {"jawOpen": float("nan")},
        [0.5] * 52,
    ],
)
def test_json_form_rejects_bad_input(bad: object) -> None:
    with pytest.raises(WeightsFrameError) as caught:
        weights_from_json(bad)
    assert caught.value.reason == "json"

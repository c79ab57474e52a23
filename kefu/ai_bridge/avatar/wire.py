"""The avatar's weights stream: one face frame in 60 bytes, and a JSON form for tools.

Binary frame (big-endian, docs/avatar.md has the byte map and a hex dump)::

    offset  size  field
    0       1     magic and version: 0xA1 (high nibble 0xA = avatar weights, low nibble 1)
    1       1     flags: bit 0 speaking, bit 1 listening, bit 2 reset, bits 3-7 zero
    2       2     u16 frame sequence (wraps at 65536)
    4       4     u32 media timestamp, ms on the bot audio's clock (wraps at 2^32)
    8       52    weights in ARKit order, each round(w * 255) as u8

Every frame is self-contained (no deltas: at 30 fps the stream is 1.8 kB/s, less than the
audio it accompanies, and a lost message costs one frame, never a resync). Decoding is
strict: a frame of the wrong length, magic, version or with reserved flag bits set raises
:class:`WeightsFrameError` (a ``ValueError``) and nothing is guessed.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntFlag
from numbers import Real

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, COUNT, INDEX, Weights
from kefu.errors import RemoteError

__all__ = [
    "FRAME_BYTES",
    "MAGIC_VERSION",
    "FrameEncoder",
    "FrameFlags",
    "WeightsFrame",
    "WeightsFrameError",
    "decode_frame",
    "dequantize",
    "encode_frame",
    "frame_to_json",
    "quantize",
    "sequence_distance",
    "weights_from_json",
    "weights_to_json",
]

MAGIC = 0xA
VERSION = 1
MAGIC_VERSION = (MAGIC << 4) | VERSION
"""First byte of every frame of this version (0xA1)."""
HEADER = struct.Struct(">BBHI")
FRAME_BYTES = HEADER.size + COUNT
"""Bytes in one frame (60)."""
LEVELS = 255
"""Quantisation steps: a weight travels as round(w * 255)."""


class FrameFlags(IntFlag):
    NONE = 0
    SPEAKING = 0x01
    """The bot is speaking (the mouth follows its audio)."""
    LISTENING = 0x02
    """The caller is speaking (attentive pose)."""
    RESET = 0x04
    """Do not interpolate from the previous frame (first frame after a barge-in)."""


_KNOWN_FLAGS = int(FrameFlags.SPEAKING | FrameFlags.LISTENING | FrameFlags.RESET)


class WeightsFrameError(RemoteError, ValueError):
    """A weights frame (binary or JSON) is malformed. ``reason`` says what failed: length,
    magic, version, flags, or json."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True, eq=False)
class WeightsFrame:
    """One decoded face frame."""

    sequence: int
    """0..65535, one more than the previous frame's (mod 65536)."""
    timestamp_ms: int
    """0..2^32-1: when the frame shows, in ms on the bot audio's clock."""
    flags: FrameFlags
    weights: Weights = field(repr=False)
    """52 weights in ARKit order, dequantised to multiples of 1/255."""


def quantize(weights: Weights) -> NDArray[np.uint8]:
    """52 weights as u8 levels (clipped to [0, 1], rounded to the nearest 1/255)."""
    vector = np.asarray(weights, dtype=np.float64)
    if vector.shape != (COUNT,):
        raise ValueError(f"expected {COUNT} weights, got shape {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise ValueError("weights must be finite")
    levels: NDArray[np.uint8] = np.rint(np.clip(vector, 0.0, 1.0) * LEVELS).astype(np.uint8)
    return levels


def dequantize(levels: NDArray[np.uint8]) -> Weights:
    """u8 levels back to weights in [0, 1]."""
    weights: Weights = (np.asarray(levels, dtype=np.float32) / np.float32(LEVELS)).astype(
        np.float32
    )
    return weights


def encode_frame(
    weights: Weights,
    *,
    sequence: int,
    timestamp_ms: int,
    flags: FrameFlags = FrameFlags.NONE,
) -> bytes:
    """One 60-byte frame. ``sequence`` and ``timestamp_ms`` are taken modulo 2^16 and 2^32
    (a running counter and a running media clock can be passed as they are)."""
    if int(flags) & ~_KNOWN_FLAGS:
        raise ValueError(f"unknown flag bits 0x{int(flags) & ~_KNOWN_FLAGS:02x}")
    header = HEADER.pack(MAGIC_VERSION, int(flags), sequence % 0x10000, timestamp_ms % 2**32)
    return header + quantize(weights).tobytes()


def decode_frame(data: bytes | bytearray | memoryview) -> WeightsFrame:
    """Parse one frame; :class:`WeightsFrameError` when it is not a valid version-1 frame."""
    raw = bytes(data)
    if len(raw) != FRAME_BYTES:
        raise WeightsFrameError(
            f"weights frame is {len(raw)} bytes, expected {FRAME_BYTES}", reason="length"
        )
    magic_version, flags, sequence, timestamp = HEADER.unpack_from(raw)
    if magic_version >> 4 != MAGIC:
        raise WeightsFrameError(
            f"first byte 0x{magic_version:02x} is not an avatar weights frame", reason="magic"
        )
    if magic_version & 0x0F != VERSION:
        raise WeightsFrameError(
            f"weights frame version {magic_version & 0x0F} unsupported (expected {VERSION})",
            reason="version",
        )
    if flags & ~_KNOWN_FLAGS:
        raise WeightsFrameError(f"reserved flag bits set in 0x{flags:02x}", reason="flags")
    levels = np.frombuffer(raw, dtype=np.uint8, offset=HEADER.size)
    return WeightsFrame(sequence, timestamp, FrameFlags(flags), dequantize(levels))


def sequence_distance(previous: int, current: int) -> int:
    """How many frames ``current`` is after ``previous`` across the u16 wrap, in
    -32768..32767 (1: the next frame; >1: frames were lost; <=0: late or repeated)."""
    diff = (current - previous) % 0x10000
    return diff - 0x10000 if diff >= 0x8000 else diff


class FrameEncoder:
    """Numbers the frames of one stream: the sequence starts at 0 and wraps at 65536."""

    def __init__(self) -> None:
        self.sequence = 0

    def encode(
        self, weights: Weights, timestamp_ms: int, flags: FrameFlags = FrameFlags.NONE
    ) -> bytes:
        frame = encode_frame(
            weights, sequence=self.sequence, timestamp_ms=timestamp_ms, flags=flags
        )
        self.sequence = (self.sequence + 1) % 0x10000
        return frame


# --- JSON form (tests, tools, debugging pages) ------------------------------------------------


def weights_to_json(weights: Weights, *, digits: int = 4) -> dict[str, float]:
    """All 52 weights by ARKit name, in ARKit order, rounded to ``digits``."""
    vector = np.asarray(weights, dtype=np.float64)
    if vector.shape != (COUNT,):
        raise ValueError(f"expected {COUNT} weights, got shape {vector.shape}")
    return {name: round(float(v), digits) for name, v in zip(BLENDSHAPES, vector, strict=True)}


def weights_from_json(obj: object) -> Weights:
    """Weights from ``{name: value}``; names left out are 0 (a sparse pose is accepted).
    Unknown names and values that are not numbers in [0, 1] raise :class:`WeightsFrameError`."""
    if not isinstance(obj, Mapping):
        raise WeightsFrameError("weights must be a JSON object", reason="json")
    out = np.zeros(COUNT, np.float32)
    for name, value in obj.items():
        if name not in INDEX:
            raise WeightsFrameError(f"no ARKit blendshape named {name!r}", reason="json")
        if isinstance(value, bool) or not isinstance(value, Real):
            raise WeightsFrameError(f"{name} is not a number: {value!r}", reason="json")
        number = float(value)
        if not math.isfinite(number) or not 0.0 <= number <= 1.0:
            raise WeightsFrameError(f"{name}={number} outside [0, 1]", reason="json")
        out[INDEX[name]] = number
    return out


def frame_to_json(frame: WeightsFrame) -> dict[str, object]:
    """A decoded frame as JSON-ready data (for logs and test tools)."""
    return {
        "seq": frame.sequence,
        "ts_ms": frame.timestamp_ms,
        "flags": [f.name.lower() for f in FrameFlags if f in frame.flags and f.name],
        "weights": weights_to_json(frame.weights),
    }

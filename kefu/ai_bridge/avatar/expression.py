"""Expression layers of the face: the six TTS emotions, the listening pose, and the rule
that lays them over speech.

Expressions move brows, eyes, cheeks, nose and the mouth corners (smile, frown, dimple,
stretch), never the shapes that open or close the lips (:data:`~.arkit.SPEECH_OWNED`): those
belong to the speech layer alone. That is what keeps a smiling /p/ closed, and what lets a
barge-in bring the mouth to rest in one frame whatever the mood. Mouth corners are shared:
while the bot speaks, the expression's share of them is scaled down so articulation shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from kefu.ai_bridge.avatar.arkit import (
    COUNT,
    EYE_BLINK,
    SPEECH_OWNED,
    Weights,
    as_pose,
    indices,
    pose_vector,
    sym,
)
from kefu.ai_bridge.speak.base import EMOTIONS
from kefu.errors import LocalError

__all__ = [
    "EMOTION_POSES",
    "LISTENING_POSE",
    "UnknownEmotion",
    "approach",
    "emotion_vector",
    "layer",
]


class UnknownEmotion(LocalError, ValueError):
    """An emotion outside the six the TTS accepts."""


EMOTION_POSES: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "neutral": as_pose(),
        "happy": as_pose(
            sym("mouthSmile", 0.55),
            sym("cheekSquint", 0.35),
            sym("eyeSquint", 0.2),
            sym("mouthDimple", 0.15),
        ),
        "sad": as_pose(
            {"browInnerUp": 0.55},
            sym("browDown", 0.2),
            sym("mouthFrown", 0.4),
            sym("eyeSquint", 0.1),
        ),
        "angry": as_pose(
            sym("browDown", 0.6),
            sym("noseSneer", 0.3),
            sym("eyeSquint", 0.3),
            sym("mouthFrown", 0.25),
        ),
        "fearful": as_pose(
            {"browInnerUp": 0.6},
            sym("browOuterUp", 0.3),
            sym("eyeWide", 0.45),
            sym("mouthStretch", 0.3),
            sym("mouthFrown", 0.1),
        ),
        "surprised": as_pose(
            {"browInnerUp": 0.5},
            sym("browOuterUp", 0.6),
            sym("eyeWide", 0.5),
        ),
    }
)
"""The expression of each TTS emotion at full intensity (sparse ARKit weights)."""

LISTENING_POSE: Mapping[str, float] = as_pose(
    {"browInnerUp": 0.12},
    sym("browOuterUp", 0.08),
    sym("eyeWide", 0.06),
    sym("mouthSmile", 0.08),
)
"""Attentive: brows slightly raised, eyes a little wider, a hint of a smile."""

assert set(EMOTION_POSES) == set(EMOTIONS)
_OWNED = set(SPEECH_OWNED)
for _pose in (*EMOTION_POSES.values(), LISTENING_POSE):
    assert not _OWNED & set(indices(_pose)), "expressions must not move the lips"

_CORNERS = indices(
    name
    for stem in ("mouthSmile", "mouthFrown", "mouthDimple", "mouthStretch")
    for name in (f"{stem}Left", f"{stem}Right")
)
_EYE_WIDE = indices(("eyeWideLeft", "eyeWideRight"))


def emotion_vector(emotion: str, intensity: float = 1.0) -> Weights:
    """The expression of ``emotion`` at ``intensity`` (0..1) as a weight vector."""
    if emotion not in EMOTION_POSES:
        raise UnknownEmotion(f"unknown emotion {emotion!r}; expected one of {', '.join(EMOTIONS)}")
    if not 0.0 <= intensity <= 1.0:
        raise ValueError(f"emotion intensity {intensity} outside 0..1")
    return pose_vector(EMOTION_POSES[emotion]) * np.float32(intensity)


def approach(current: Weights, target: Weights, dt_s: float, tau_s: float) -> Weights:
    """One step of a first-order lag: ``current`` moves towards ``target`` with time
    constant ``tau_s`` over ``dt_s`` (frame-rate independent)."""
    if dt_s <= 0:
        return current
    keep = math.exp(-dt_s / tau_s)
    return (current * keep + target * (1.0 - keep)).astype(np.float32)


def layer(
    speech: Weights,
    expression: Weights,
    gaze: Weights,
    blink: float,
    *,
    corner_share: float,
) -> Weights:
    """The face: speech, plus the expression (its mouth corners scaled by ``corner_share``),
    plus the gaze, with the lids closed by ``blink`` (a blink also relaxes wide eyes).
    Speech-owned shapes come from ``speech`` unchanged."""
    expr = expression.astype(np.float32, copy=True)
    expr[list(SPEECH_OWNED)] = 0.0
    expr[list(_CORNERS)] *= corner_share
    out: Weights = np.clip(speech + expr + gaze, 0.0, 1.0).astype(np.float32)
    if blink > 0.0:
        lids = list(EYE_BLINK)
        out[lids] = np.maximum(out[lids], blink)
        out[list(_EYE_WIDE)] *= 1.0 - blink
    assert out.shape == (COUNT,)
    return out

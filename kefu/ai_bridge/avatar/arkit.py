"""The 52 ARKit face blendshapes: names in Apple's canonical order, indices, channel groups.

Every weight vector of the avatar is a float array of :data:`COUNT` values in [0, 1], indexed
in the order of :data:`BLENDSHAPES` (the order of Apple's ``ARFaceAnchor.BlendShapeLocation``
documentation: left eye, right eye, mouth and jaw, eyebrows, cheeks, nose, tongue). Left and
right are the face's own sides, as in ARKit. Poses elsewhere are written as sparse
``{name: weight}`` mappings and turned into vectors here, so a typo in a name fails at import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BLENDSHAPES",
    "COUNT",
    "EYE_BLINK",
    "EYE_LOOK",
    "INDEX",
    "SPEECH_OWNED",
    "Weights",
    "as_pose",
    "index_of",
    "indices",
    "pose_vector",
    "rest",
    "sym",
]

Weights = NDArray[np.float32]
"""A vector of :data:`COUNT` blendshape weights (or a frames × COUNT array of them)."""

BLENDSHAPES: tuple[str, ...] = (
    # left eye
    "eyeBlinkLeft",
    "eyeLookDownLeft",
    "eyeLookInLeft",
    "eyeLookOutLeft",
    "eyeLookUpLeft",
    "eyeSquintLeft",
    "eyeWideLeft",
    # right eye
    "eyeBlinkRight",
    "eyeLookDownRight",
    "eyeLookInRight",
    "eyeLookOutRight",
    "eyeLookUpRight",
    "eyeSquintRight",
    "eyeWideRight",
    # mouth and jaw
    "jawForward",
    "jawLeft",
    "jawRight",
    "jawOpen",
    "mouthClose",
    "mouthFunnel",
    "mouthPucker",
    "mouthLeft",
    "mouthRight",
    "mouthSmileLeft",
    "mouthSmileRight",
    "mouthFrownLeft",
    "mouthFrownRight",
    "mouthDimpleLeft",
    "mouthDimpleRight",
    "mouthStretchLeft",
    "mouthStretchRight",
    "mouthRollLower",
    "mouthRollUpper",
    "mouthShrugLower",
    "mouthShrugUpper",
    "mouthPressLeft",
    "mouthPressRight",
    "mouthLowerDownLeft",
    "mouthLowerDownRight",
    "mouthUpperUpLeft",
    "mouthUpperUpRight",
    # eyebrows
    "browDownLeft",
    "browDownRight",
    "browInnerUp",
    "browOuterUpLeft",
    "browOuterUpRight",
    # cheeks
    "cheekPuff",
    "cheekSquintLeft",
    "cheekSquintRight",
    # nose
    "noseSneerLeft",
    "noseSneerRight",
    # tongue
    "tongueOut",
)

COUNT = len(BLENDSHAPES)
assert COUNT == 52 and len(set(BLENDSHAPES)) == COUNT

INDEX: Mapping[str, int] = MappingProxyType({name: i for i, name in enumerate(BLENDSHAPES)})
"""Blendshape name → its index in a weight vector."""


def index_of(name: str) -> int:
    """The index of blendshape ``name``; ``KeyError`` naming it when there is no such shape."""
    try:
        return INDEX[name]
    except KeyError:
        raise KeyError(f"no ARKit blendshape named {name!r}") from None


def indices(names: Iterable[str]) -> tuple[int, ...]:
    """The indices of ``names``, in the order given."""
    return tuple(index_of(name) for name in names)


def sym(stem: str, weight: float) -> dict[str, float]:
    """``{stem}Left`` and ``{stem}Right`` at the same weight (a symmetric pose part)."""
    return {f"{stem}Left": weight, f"{stem}Right": weight}


def as_pose(*parts: Mapping[str, float]) -> Mapping[str, float]:
    """Merge sparse pose parts into one read-only pose, checking names and ranges."""
    merged: dict[str, float] = {}
    for part in parts:
        merged.update(part)
    for name, weight in merged.items():
        index_of(name)
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"pose weight {name}={weight} outside [0, 1]")
    return MappingProxyType(merged)


def pose_vector(pose: Mapping[str, float]) -> Weights:
    """A sparse ``{name: weight}`` pose as a dense vector (unnamed shapes at 0)."""
    vector = np.zeros(COUNT, np.float32)
    for name, weight in pose.items():
        vector[index_of(name)] = weight
    return vector


def rest() -> Weights:
    """The neutral face: every weight 0."""
    return np.zeros(COUNT, np.float32)


EYE_BLINK: tuple[int, int] = (INDEX["eyeBlinkLeft"], INDEX["eyeBlinkRight"])
"""Both eyelids."""

EYE_LOOK: Mapping[str, int] = MappingProxyType(
    {name: i for name, i in INDEX.items() if name.startswith("eyeLook")}
)
"""The eight gaze shapes (down, in, out, up for each eye)."""

SPEECH_OWNED: tuple[int, ...] = indices(
    name
    for name in BLENDSHAPES
    if name.startswith(("jaw", "mouthClose", "mouthFunnel", "mouthPucker", "mouthRoll"))
    or name.startswith(("mouthShrug", "mouthPress", "mouthLowerDown", "mouthUpperUp"))
    or name in ("mouthLeft", "mouthRight", "cheekPuff", "tongueOut")
)
"""Shapes that open, close, round or press the lips: only the speech layer moves them, so no
expression can hold the mouth open over a /p/ or keep it open after a barge-in. The mouth
corners (smile, frown, dimple, stretch) are shared between speech and expression."""

"""What each viseme looks like (a sparse ARKit pose) and how it coarticulates.

The poses are the targets the lip-sync blends between; ``dominance`` says how firmly a viseme
holds its shape against its neighbours (Cohen & Massaro's dominance functions), and
``rounding_dominance`` the same for lip rounding alone. docs/avatar.md tabulates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kefu.ai_bridge.avatar.arkit import as_pose, sym
from kefu.ai_bridge.avatar.visemes import Viseme

__all__ = ["SHAPES", "VisemeShape"]


@dataclass(frozen=True, slots=True)
class VisemeShape:
    """How one viseme looks and how firmly it holds that look against its neighbours."""

    pose: Mapping[str, float]
    """Sparse ARKit weights of the target mouth."""
    dominance: float
    """Strength against neighbouring visemes (>1: wins; <1: borrows from its neighbours)."""
    rounding_dominance: float
    """The same for lip rounding (mouthPucker, mouthFunnel): tongue consonants are nearly
    transparent, so rounding of a coming vowel shows through them."""
    rounded: bool = False
    """Rounds the lips: its rounding starts early (anticipation of a rounded vowel)."""
    vowel: bool = False
    """A vowel: it gets the larger share when one phoneme splits into several visemes."""


V = Viseme

SHAPES: Mapping[Viseme, VisemeShape] = MappingProxyType(
    {
        V.SIL: VisemeShape(as_pose(), 1.0, 1.0),  # lipsync scales it by the pause length
        V.PP: VisemeShape(
            as_pose(
                {"jawOpen": 0.04, "mouthClose": 0.04, "mouthRollLower": 0.2},
                {"mouthRollUpper": 0.12},
                sym("mouthPress", 0.55),
            ),
            1.3,
            0.2,
        ),
        V.FF: VisemeShape(
            as_pose(
                {"jawOpen": 0.1, "mouthRollLower": 0.5},
                sym("mouthUpperUp", 0.25),
                sym("mouthStretch", 0.1),
            ),
            1.2,
            0.3,
        ),
        V.TH: VisemeShape(
            as_pose(
                {"jawOpen": 0.16, "tongueOut": 0.4},
                sym("mouthLowerDown", 0.12),
                sym("mouthStretch", 0.08),
            ),
            0.9,
            0.2,
        ),
        V.DD: VisemeShape(
            as_pose(
                {"jawOpen": 0.2},
                sym("mouthLowerDown", 0.15),
                sym("mouthStretch", 0.12),
                sym("mouthUpperUp", 0.08),
            ),
            0.6,
            0.15,
        ),
        V.KK: VisemeShape(
            as_pose({"jawOpen": 0.24}, sym("mouthStretch", 0.15), sym("mouthLowerDown", 0.1)),
            0.5,
            0.15,
        ),
        V.CH: VisemeShape(
            as_pose(
                {"jawOpen": 0.14, "mouthFunnel": 0.5, "mouthPucker": 0.3},
                sym("mouthUpperUp", 0.22),
                sym("mouthLowerDown", 0.2),
            ),
            1.2,
            1.2,
            rounded=True,
        ),
        V.SS: VisemeShape(
            as_pose(
                {"jawOpen": 0.08},
                sym("mouthStretch", 0.35),
                sym("mouthSmile", 0.15),
                sym("mouthUpperUp", 0.12),
                sym("mouthLowerDown", 0.12),
            ),
            0.9,
            0.5,
        ),
        V.NN: VisemeShape(
            as_pose({"jawOpen": 0.16}, sym("mouthStretch", 0.1), sym("mouthLowerDown", 0.08)),
            0.5,
            0.15,
        ),
        V.RR: VisemeShape(
            as_pose(
                {"jawOpen": 0.16, "mouthFunnel": 0.35, "mouthPucker": 0.35},
                sym("mouthUpperUp", 0.1),
            ),
            0.9,
            0.9,
            rounded=True,
        ),
        V.AA: VisemeShape(
            as_pose(
                {"jawOpen": 0.65},
                sym("mouthLowerDown", 0.3),
                sym("mouthUpperUp", 0.12),
                sym("mouthStretch", 0.08),
            ),
            1.2,
            1.0,
            vowel=True,
        ),
        V.E: VisemeShape(
            as_pose(
                {"jawOpen": 0.38},
                sym("mouthStretch", 0.3),
                sym("mouthSmile", 0.12),
                sym("mouthLowerDown", 0.2),
                sym("mouthUpperUp", 0.1),
            ),
            1.0,
            1.0,
            vowel=True,
        ),
        V.I: VisemeShape(
            as_pose(
                {"jawOpen": 0.18},
                sym("mouthStretch", 0.45),
                sym("mouthSmile", 0.3),
                sym("mouthUpperUp", 0.12),
                sym("mouthLowerDown", 0.1),
            ),
            1.0,
            1.0,
            vowel=True,
        ),
        V.O: VisemeShape(
            as_pose(
                {"jawOpen": 0.42, "mouthFunnel": 0.65, "mouthPucker": 0.25},
                sym("mouthLowerDown", 0.1),
            ),
            1.0,
            1.0,
            rounded=True,
            vowel=True,
        ),
        V.U: VisemeShape(
            as_pose({"jawOpen": 0.14, "mouthPucker": 0.8, "mouthFunnel": 0.35}),
            1.0,
            1.0,
            rounded=True,
            vowel=True,
        ),
        V.NEUTRAL: VisemeShape(
            as_pose({"jawOpen": 0.3}, sym("mouthLowerDown", 0.12), sym("mouthStretch", 0.05)),
            0.8,
            0.6,
            vowel=True,
        ),
    }
)
assert set(SHAPES) == set(Viseme)

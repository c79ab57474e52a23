"""The default head's 52 ARKit morph targets, computed from the tagged mesh.

Each target is an (N, 3) array of offsets at weight 1 (:func:`morph_targets`, ARKit order;
:class:`~.head_mesh.MorphTarget` keeps only the vertices that move). Three kinds of motion:

* **rigid turns**: the jaw turns about a hinge in front of the ears (every vertex weighted by
  how much of it belongs to the jaw); the eyeballs turn about their centres for the gaze; the
  lids turn about the eyeball's centre, ring by ring, so they slide over the eye (a blink
  brings the upper margin down onto the lower one);
* **local pulls**: smooth Gaussian fields round a landmark (a mouth corner, a brow, a cheek)
  move the skin, the lips and the brows that lie in them;
* **lip shaping**: the lip rings (``ring`` ≤ 0 on :attr:`~.head_build.Part.LIPS`) are pressed,
  rolled, pushed up or down, rounded and pushed out.

The mouth's cavity, the lid tuck and the lashes follow the vertex they are anchored to.
Left and right are the face's own (+X is the face's left).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES
from kefu.ai_bridge.avatar.head_build import Part, RawHead
from kefu.ai_bridge.avatar.head_shape import LANDMARKS

__all__ = ["JAW_OPEN_RAD", "morph_targets"]

F64 = NDArray[np.float64]

JAW_OPEN_RAD = 0.31
"""How far the jaw turns at jawOpen = 1."""
FACE_PARTS = (Part.SKIN, Part.LIDS, Part.LIPS, Part.BROW)


def _smooth(edge0: float, edge1: float, x: F64) -> F64:
    t: F64 = np.clip((x - edge0) / (edge1 - edge0), 0.0, 1.0)
    out: F64 = t * t * (3.0 - 2.0 * t)
    return out


def _turn_x(p: F64, center: F64, angle: F64) -> F64:
    """Offsets that turn points ``p`` about the X axis through ``center`` by ``angle``
    (positive: a point in front of the centre moves down)."""
    rel = p - center
    c, s = np.cos(angle), np.sin(angle)
    y = rel[:, 1] * c - rel[:, 2] * s
    z = rel[:, 1] * s + rel[:, 2] * c
    out = np.zeros_like(p)
    out[:, 1], out[:, 2] = y - rel[:, 1], z - rel[:, 2]
    return out


def _turn_y(p: F64, center: F64, angle: F64) -> F64:
    rel = p - center
    c, s = np.cos(angle), np.sin(angle)
    out = np.zeros_like(p)
    out[:, 0] = rel[:, 0] * c + rel[:, 2] * s - rel[:, 0]
    out[:, 2] = -rel[:, 0] * s + rel[:, 2] * c - rel[:, 2]
    return out


class _Face:
    """Per-vertex weights shared by the targets."""

    def __init__(self, raw: RawHead) -> None:
        lm = LANDMARKS
        self.raw = raw
        self.p = raw.positions
        self.n = len(self.p)
        x, y, z = self.p.T
        self.x, self.y, self.z = x, y, z
        part = raw.part
        self.face = np.isin(part, FACE_PARTS) * _smooth(0.12, 0.3, z)
        lips = part == Part.LIPS
        t = np.where(raw.ring <= 0.0, raw.ring + 1.0, 1.0)
        self.t = np.where(lips, t, 1.0)
        """0 at the inner lip edge, 1 at the vermilion border and beyond."""
        spread = np.where(raw.ring <= 0.0, 1.0, np.exp(-((raw.ring / 0.22) ** 2)))
        self.lip = lips * spread
        """1 on the lips, fading over the skin rings round them."""
        sin_b = np.sqrt(np.clip(1.0 - raw.xi**2, 0.0, 1.0))
        self.mid = np.where(lips | (part == Part.MOUTH), sin_b**0.7, 0.0)
        """1 in the middle of the lips, 0 at the corners."""
        self.up = self.lip * (raw.upper > 0)
        self.lo = self.lip * (raw.upper < 0)
        self.ym = lm.mouth_y
        self.w = lm.mouth_half_width
        # How much of each vertex the jaw carries: the lower lip all of it in the middle,
        # less toward the corners (the opening is a lens, not a box), nothing of the upper.
        along = np.clip(np.abs(x) / (1.04 * lm.mouth_half_width), 0.0, 1.0)
        by_ring = np.where(raw.upper < 0, (1.0 - along**2) ** 0.7, 0.0)
        by_ring = np.where(raw.upper == 0, 0.5 * (1.0 - along**2) ** 0.7, by_ring)
        by_pos = _smooth(self.ym + 0.012, self.ym - 0.045, y) * _smooth(-0.48, -0.28, y)
        by_pos = by_pos * _smooth(-0.25, 0.15, z)
        jaw = np.where(np.isin(part, (Part.SKIN, Part.LIPS)), by_pos, 0.0)
        inner = (lips & (raw.ring <= 0.0)) | (part == Part.MOUTH)
        jaw = np.where(inner, by_ring, jaw)
        near = lips & (raw.ring > 0.0)
        mix = _smooth(0.0, 0.7, raw.ring)
        jaw = np.where(near, by_ring * (1 - mix) + by_pos * mix, jaw)
        jaw = np.where(np.isin(part, (Part.TEETH_LOWER, Part.TONGUE)), 1.0, jaw)
        self.jaw = jaw
        self.hinge = np.array([0.0, lm.hinge[0], lm.hinge[1]])

    def bump(self, cx: float, cy: float, rx: float, ry: float) -> F64:
        """A Gaussian field over the face's front, in front-view coordinates."""
        out: F64 = self.face * np.exp(-(((self.x - cx) / rx) ** 2) - ((self.y - cy) / ry) ** 2)
        return out

    def side(self, sign: int, width: float = 0.05) -> F64:
        """1 on the face's ``sign`` side (+1 left, +X), easing across the middle."""
        return _smooth(-width, width, sign * self.x)

    def move(self, weight: F64, d: tuple[float, float, float]) -> F64:
        return weight[:, None] * np.asarray(d, np.float64)[None, :]

    def jaw_turn(self, angle: float) -> F64:
        return self.jaw[:, None] * _turn_x(self.p, self.hinge, np.full(self.n, angle))


Target = Callable[[_Face], F64]


# -- jaw and lips ---------------------------------------------------------------------------


def jaw_open(f: _Face) -> F64:
    out = f.jaw_turn(JAW_OPEN_RAD)
    out[:, 2] += 0.03 * f.jaw
    return out


def mouth_close(f: _Face) -> F64:
    """Brings the lips together over an open jaw (undoes jawOpen's gap on the lips)."""
    gap = jaw_open(f)
    lower = f.lo * (1.0 - _smooth(0.0, 0.6, f.raw.ring.clip(0, None))) * 0.82
    out: F64 = -gap * lower[:, None]
    out += f.move(f.up * (1 - f.t * 0.6) * f.mid, (0.0, -0.024, 0.004))
    return out


def _corner(f: _Face, sign: int, d: tuple[float, float, float], rx: float, ry: float) -> F64:
    return f.move(f.bump(sign * f.w, f.ym, rx, ry), (sign * d[0], d[1], d[2]))


def smile(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = _corner(f, sign, (0.024, 0.04, -0.016), 0.075, 0.06)
        out += f.move(f.bump(sign * 0.17, 0.12, 0.07, 0.07), (sign * 0.004, 0.016, 0.008))
        return out

    return target


def frown(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = _corner(f, sign, (0.004, -0.03, -0.004), 0.065, 0.05)
        return out + f.move(f.bump(sign * 0.1, -0.1, 0.06, 0.06), (0.0, -0.008, 0.0))

    return target


def dimple(sign: int) -> Target:
    return lambda f: _corner(f, sign, (0.012, 0.004, -0.02), 0.05, 0.045)


def stretch(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = _corner(f, sign, (0.03, -0.012, -0.01), 0.09, 0.06)
        return out + f.move(f.lo * f.side(sign) * f.mid, (0.0, -0.008, 0.0))

    return target


def shift(sign: int) -> Target:
    def target(f: _Face) -> F64:
        return f.move(f.bump(0.0, f.ym, 0.16, 0.09), (sign * 0.04, 0.003, -0.004))

    return target


def press(sign: int) -> Target:
    def target(f: _Face) -> F64:
        weight = f.lip * f.side(sign)
        out = f.move(weight, (0.0, 0.0, -0.006))
        out[:, 1] -= 0.45 * (f.y - f.ym) * weight
        return out

    return target


def lower_down(sign: int) -> Target:
    def target(f: _Face) -> F64:
        return f.move(f.lo * f.side(sign, 0.06) * f.mid, (0.0, -0.032, 0.004))

    return target


def upper_up(sign: int) -> Target:
    def target(f: _Face) -> F64:
        return f.move(f.up * f.side(sign, 0.06) * f.mid, (0.0, 0.028, 0.004))

    return target


def _roll(f: _Face, weight: F64) -> F64:
    """Roll a lip in: it thins toward the mouth line and its inner part sinks into the
    mouth, so less of the red shows; the inner edge stays on the line (no gap opens)."""
    out = f.move(weight * (1.3 - f.t), (0.0, 0.0, -0.014))
    out[:, 1] = -0.6 * (f.y - f.ym) * weight
    return out


def roll_lower(f: _Face) -> F64:
    return _roll(f, f.lo * f.mid)


def roll_upper(f: _Face) -> F64:
    return _roll(f, f.up * f.mid)


def shrug_lower(f: _Face) -> F64:
    chin = f.bump(0.0, -0.16, 0.09, 0.07)
    return f.move(f.lo + chin, (0.0, 0.018, 0.01))


def shrug_upper(f: _Face) -> F64:
    return f.move(f.up * f.t, (0.0, 0.01, 0.006)) + f.move(f.up, (0.0, 0.0, 0.005))


def funnel(f: _Face) -> F64:
    """Lips pushed out and turned out round an open, rounded mouth ("oh")."""
    region = f.bump(0.0, f.ym, 0.15, 0.1)
    out = np.zeros((f.n, 3))
    out[:, 0] = -0.4 * f.x * region
    opening = f.mid**0.6 * (1.25 - f.t)
    out += f.move(f.up * opening, (0.0, 0.016, 0.0))
    out += f.move(f.lo * opening, (0.0, -0.024, 0.0))
    out += f.move(f.lip * (0.4 + 0.6 * f.t) + 0.3 * region, (0.0, 0.0, 0.03))
    return out


def pucker(f: _Face) -> F64:
    """Lips pushed out and drawn together, closed ("oo", a kiss)."""
    region = f.bump(0.0, f.ym, 0.15, 0.09)
    out = np.zeros((f.n, 3))
    out[:, 0] = -0.5 * f.x * region
    out[:, 1] = 0.12 * (f.y - f.ym) * f.lip
    out += f.move(f.lip * (0.6 + 0.4 * f.mid) + 0.35 * region, (0.0, 0.0, 0.04))
    return out


def jaw_forward(f: _Face) -> F64:
    soft = np.where(np.isin(f.raw.part, (Part.LIPS, Part.MOUTH)), 0.6, 1.0)
    return f.move(f.jaw * soft, (0.0, 0.0, 0.032))


def jaw_side(sign: int) -> Target:
    return lambda f: f.move(f.jaw, (sign * 0.036, 0.0, 0.0))


def tongue_out(f: _Face) -> F64:
    tongue = f.raw.part == Part.TONGUE
    tip = np.where(tongue, f.raw.ring, 0.0)
    out = np.zeros((f.n, 3))
    out[:, 2] = tongue * (0.02 + 0.13 * tip**0.8)
    out[:, 1] = tongue * (0.03 * tip)
    out[:, 0] = -0.15 * f.x * tip * tongue
    out += f.move(f.lo * f.mid * (1.2 - f.t), (0.0, -0.02, 0.006))
    out += f.move(f.up * f.mid * (1.2 - f.t), (0.0, 0.004, 0.0))
    return out


# -- cheeks, nose, brows --------------------------------------------------------------------


def cheek_puff(f: _Face) -> F64:
    out = np.zeros((f.n, 3))
    for sign in (1, -1):
        weight = f.bump(sign * 0.2, -0.005, 0.085, 0.09)
        out += f.move(weight, (sign * 0.03, 0.0, 0.026))
    return out + f.move(f.lip, (0.0, 0.0, 0.006))


def cheek_squint(sign: int) -> Target:
    def target(f: _Face) -> F64:
        return f.move(f.bump(sign * 0.2, 0.24, 0.075, 0.055), (0.0, 0.018, 0.006))

    return target


def nose_sneer(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = f.move(f.bump(sign * 0.048, 0.165, 0.035, 0.05), (sign * 0.003, 0.016, 0.004))
        return out + f.move(f.bump(sign * 0.04, 0.41, 0.05, 0.04), (0.0, -0.008, 0.0))

    return target


def brow_down(sign: int) -> Target:
    def target(f: _Face) -> F64:
        weight = f.bump(sign * 0.11, 0.44, 0.1, 0.055) * f.side(sign, 0.04)
        return f.move(weight, (-sign * 0.01, -0.026, 0.006))

    return target


def brow_inner_up(f: _Face) -> F64:
    out = np.zeros((f.n, 3))
    for sign in (1, -1):
        out += f.move(f.bump(sign * 0.065, 0.45, 0.065, 0.065), (0.0, 0.03, 0.0))
    return out


def brow_outer_up(sign: int) -> Target:
    return lambda f: f.move(f.bump(sign * 0.21, 0.45, 0.07, 0.06), (sign * 0.002, 0.028, 0.0))


# -- eyes -------------------------------------------------------------------------------------

_LID_RINGS = np.array([-0.05, 0.0, 0.06, 0.13, 0.22, 0.33, 0.47, 0.64])
_LID_FALLOFF = np.array([1.0, 1.0, 0.86, 0.62, 0.36, 0.13, 0.03, 0.0])


def _eye_arrays(f: _Face, sign: int) -> tuple[F64, F64, F64, F64]:
    """The eye's centre, which lid vertices belong to it (falloff per ring, upper/lower),
    and the angle between its upper and lower margin at each vertex's x."""
    raw = f.raw
    center = raw.eye_centers[0 if sign > 0 else 1]
    lids = (raw.part == Part.LIDS) & (sign * f.x > 0)
    fall = np.where(lids, np.interp(raw.ring, _LID_RINGS, _LID_FALLOFF), 0.0)
    rel = f.p - center
    elev = np.arctan2(rel[:, 1], rel[:, 2])
    margin = lids & (np.abs(raw.ring) < 1e-9)
    gap = np.zeros(f.n)
    ups, los = margin & (raw.upper > 0), margin & (raw.upper < 0)
    xs_u, xs_l = np.argsort(f.x[ups]), np.argsort(f.x[los])
    e_up = np.interp(f.x, f.x[ups][xs_u], elev[ups][xs_u])
    e_lo = np.interp(f.x, f.x[los][xs_l], elev[los][xs_l])
    gap = np.where(lids, np.maximum(e_up - e_lo, 0.0), 0.0)
    return center, fall, gap, elev


def _lids(f: _Face, sign: int, upper: float, lower: float, *, per_gap: bool) -> F64:
    """Turn the lids: ``upper``/``lower`` in radians (positive opens), or in units of the
    margin gap when ``per_gap``."""
    center, fall, gap, _ = _eye_arrays(f, sign)
    scale = gap if per_gap else np.ones(f.n)
    # _turn_x moves the front down for a positive angle: an upper lid opens upward.
    angle = np.where(f.raw.upper > 0, -upper, lower) * scale * fall
    return _turn_x(f.p, center, angle) * (fall > 0)[:, None]


def blink(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = _lids(f, sign, -0.88, -0.12, per_gap=True)
        center, fall, _, _ = _eye_arrays(f, sign)
        radial = f.p - center
        radial /= np.maximum(np.linalg.norm(radial, axis=1), 1e-9)[:, None]
        return out + radial * (0.005 * fall * (f.raw.upper > 0))[:, None]

    return target


def squint(sign: int) -> Target:
    def target(f: _Face) -> F64:
        out = _lids(f, sign, -0.1, -0.32, per_gap=True)
        return out + f.move(f.bump(sign * 0.17, 0.27, 0.07, 0.035), (0.0, 0.006, 0.002))

    return target


def wide(sign: int) -> Target:
    return lambda f: _lids(f, sign, 0.3, 0.06, per_gap=False)


def _eyeball(f: _Face, sign: int, *, pitch: float = 0.0, yaw: float = 0.0) -> F64:
    raw = f.raw
    center = raw.eye_centers[0 if sign > 0 else 1]
    ball = (raw.part == Part.EYEBALL) & (raw.xi * sign > 0)
    out: F64 = _turn_x(f.p, center, np.full(f.n, pitch)) + _turn_y(f.p, center, np.full(f.n, yaw))
    out *= ball[:, None]
    return out


def look(sign: int, direction: str) -> Target:
    def target(f: _Face) -> F64:
        if direction == "Up":
            return _eyeball(f, sign, pitch=-0.3) + _lids(f, sign, 0.12, -0.04, per_gap=False)
        if direction == "Down":
            return _eyeball(f, sign, pitch=0.36) + _lids(f, sign, -0.3, 0.05, per_gap=False)
        inward = direction == "In"
        return _eyeball(f, sign, yaw=(-sign if inward else sign) * 0.42)

    return target


def _targets() -> dict[str, Target]:
    table: dict[str, Target] = {
        "jawOpen": jaw_open,
        "jawForward": jaw_forward,
        "mouthClose": mouth_close,
        "mouthFunnel": funnel,
        "mouthPucker": pucker,
        "mouthRollLower": roll_lower,
        "mouthRollUpper": roll_upper,
        "mouthShrugLower": shrug_lower,
        "mouthShrugUpper": shrug_upper,
        "cheekPuff": cheek_puff,
        "browInnerUp": brow_inner_up,
        "tongueOut": tongue_out,
        "mouthLeft": shift(1),
        "mouthRight": shift(-1),
        "jawLeft": jaw_side(1),
        "jawRight": jaw_side(-1),
    }
    for side, sign in (("Left", 1), ("Right", -1)):
        table[f"eyeBlink{side}"] = blink(sign)
        table[f"eyeSquint{side}"] = squint(sign)
        table[f"eyeWide{side}"] = wide(sign)
        for direction in ("Up", "Down", "In", "Out"):
            table[f"eyeLook{direction}{side}"] = look(sign, direction)
        table[f"mouthSmile{side}"] = smile(sign)
        table[f"mouthFrown{side}"] = frown(sign)
        table[f"mouthDimple{side}"] = dimple(sign)
        table[f"mouthStretch{side}"] = stretch(sign)
        table[f"mouthPress{side}"] = press(sign)
        table[f"mouthLowerDown{side}"] = lower_down(sign)
        table[f"mouthUpperUp{side}"] = upper_up(sign)
        table[f"browDown{side}"] = brow_down(sign)
        table[f"browOuterUp{side}"] = brow_outer_up(sign)
        table[f"cheekSquint{side}"] = cheek_squint(sign)
        table[f"noseSneer{side}"] = nose_sneer(sign)
    assert set(table) == set(BLENDSHAPES), set(BLENDSHAPES) ^ set(table)
    return table


TARGETS = _targets()

_JAW_TARGETS = frozenset({"jawOpen", "jawForward", "jawLeft", "jawRight"})


def morph_targets(raw: RawHead) -> list[F64]:
    """The 52 dense offset arrays, in ARKit order."""
    face = _Face(raw)
    anchored = raw.anchor >= 0
    cavity = anchored & (raw.part == Part.MOUTH)
    out = []
    for name in BLENDSHAPES:
        delta = TARGETS[name](face)
        follow = anchored & ~cavity if name in _JAW_TARGETS else anchored
        delta[follow] = raw.follow[follow, None] * delta[raw.anchor[follow]]
        out.append(delta)
    return out

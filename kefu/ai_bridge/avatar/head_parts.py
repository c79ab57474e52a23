"""The default head's separate parts: eyeballs, teeth, tongue, hair, brows, shoulders.

Each function adds its vertices (with the tags :mod:`.head_morphs` reads) and triangles to a
:class:`~.head_build.MeshBuilder`. Sizes are in the frame of :mod:`.head_mesh`, placed from
:data:`~.head_shape.LANDMARKS` and the skin function, so the parts sit on the skin.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.head_build import SKIN, MeshBuilder, Part, skin_point
from kefu.ai_bridge.avatar.head_shape import LANDMARKS, invert, surface

__all__ = ["body", "brows", "eyeball", "hair", "mouth_front_z", "teeth", "tongue"]

F64 = NDArray[np.float64]

HAIR = (62, 43, 33)
BROW = (70, 49, 38)
TEETH = (226, 221, 208)
GUM = (196, 108, 112)
CLOTH = (46, 72, 110)


def _lerp_colors(stops: list[tuple[float, tuple[int, int, int]]], t: F64) -> F64:
    at = np.array([s for s, _ in stops])
    cols = np.array([c for _, c in stops], np.float64)
    return np.stack([np.interp(t, at, cols[:, k]) for k in range(3)], axis=-1)


def eyeball(mb: MeshBuilder, center: F64, radius: float, side: int) -> None:
    """A sphere looking along +Z: pupil, iris (with a darker limbal ring), sclera."""
    theta = np.array(
        [0.0, 0.1, 0.19, 0.19, 0.28, 0.37, 0.43, 0.48, 0.48, 0.58, 0.75, 0.95, 1.2, 1.5, 1.9]
    )
    colors = [
        (12, 10, 10),
        (12, 10, 10),
        (12, 10, 10),
        (78, 55, 36),
        (122, 88, 56),
        (104, 74, 46),
        (72, 50, 33),
        (52, 36, 26),
        (224, 220, 214),
        (236, 232, 226),
        (238, 234, 228),
        (232, 226, 220),
        (222, 208, 200),
        (210, 190, 185),
        (200, 180, 175),
    ]
    seg = 24
    az = 2 * np.pi * np.arange(seg) / seg
    bulge = 1.0 + 0.04 * np.cos(np.clip(theta / 0.48, 0, 1) * np.pi / 2) * (theta < 0.48)
    pole = mb.add(center + np.array([[0, 0, radius * bulge[0]]]), colors[0], Part.EYEBALL, xi=side)
    prev = pole
    for k in range(1, len(theta)):
        t = theta[k]
        d = np.stack([np.sin(t) * np.cos(az), np.sin(t) * np.sin(az), np.full(seg, np.cos(t))], 1)
        ring = mb.add(center + radius * bulge[k] * d, colors[k], Part.EYEBALL, ring=t, xi=side)
        if k == 1:
            mb.fan(int(pole[0]), ring)
        else:
            mb.strip(prev, ring, closed=True)
        prev = ring


def mouth_front_z() -> float:
    """Depth of the skin at the middle of the mouth (the lips stand a little in front)."""
    return float(skin_point(*invert(np.array([0.0]), np.array([LANDMARKS.mouth_y])))[0, 2])


def _arch_columns(bounds: list[float], per: int = 2) -> tuple[F64, F64]:
    """x positions along a dental arch and, for each, 1 on a boundary between teeth."""
    edges = sorted({b for b in bounds} | {-b for b in bounds})
    xs, seam = [], []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        for k in range(per):
            xs.append(a + (b - a) * k / per)
            seam.append(1.0 if k == 0 else 0.0)
    xs.append(edges[-1])
    seam.append(1.0)
    return np.array(xs), np.array(seam)


def teeth(mb: MeshBuilder) -> None:
    """Upper and lower front teeth on arches behind the lips, with gums."""
    ym = LANDMARKS.mouth_y
    front = mouth_front_z() - 0.022
    specs = [
        (Part.TEETH_UPPER, [0.0, 0.02, 0.036, 0.051, 0.065, 0.079, 0.093, 0.105], front, +1),
        (
            Part.TEETH_LOWER,
            [0.0, 0.014, 0.028, 0.042, 0.056, 0.07, 0.084],
            front - 0.012,
            -1,
        ),
    ]
    for part, bounds, z0, up in specs:
        x, seam = _arch_columns(bounds)
        z = z0 - (2.6 if up > 0 else 3.6) * x**2 - 40.0 * np.maximum(np.abs(x) - 0.07, 0) ** 2
        edge = ym - up * (0.0035 - 0.0015 * seam) - up * 0.0015 * np.exp(-((x / 0.03) ** 2))
        # (y above the edge, z back from the front face, colour) from the gum to the back.
        rows = [
            (0.052 if up > 0 else 0.042, 0.004, GUM),
            (0.030, 0.0, GUM),
            (0.030, 0.0, TEETH),
            (0.012, -0.001, TEETH),
            (0.0, 0.0015, TEETH),
            (0.0, 0.009, (214, 208, 196)),
            (0.03, 0.014, (170, 160, 150)),
        ]
        prev: NDArray[np.int64] | None = None
        for dy, back, color in rows:
            pos = np.stack([x, edge + up * dy, z - back], 1)
            col = np.broadcast_to(np.array(color, np.float64), pos.shape).copy()
            if color == TEETH:
                col -= seam[:, None] * 34.0
                col -= (np.abs(x)[:, None] / 0.1) * 30.0
            ring = mb.add(pos, col, part, xi=x / 0.1)
            if prev is not None:
                a, b = (prev, ring) if up > 0 else (ring, prev)
                mb.strip(a, b, closed=False)
            prev = ring


def tongue(mb: MeshBuilder) -> None:
    """A flattened dome on the floor of the mouth; ``ring`` runs 0 (root) to 1 (tip)."""
    ym = LANDMARKS.mouth_y
    c = np.array([0.0, ym - 0.032, mouth_front_z() - 0.118])
    radii = np.array([0.056, 0.024, 0.072])
    seg = 24
    az = 2 * np.pi * np.arange(seg) / seg
    elev = np.array([-0.35, -0.1, 0.2, 0.5, 0.8, 1.1, 1.35])
    prev = np.zeros(0, np.int64)
    for e in elev:
        d = np.stack([np.cos(e) * np.sin(az), np.full(seg, np.sin(e)), np.cos(e) * np.cos(az)], 1)
        pos = c + radii * d
        groove = np.exp(-((pos[:, 0] / 0.012) ** 2)) * (e > 0.3)
        pos[:, 1] -= 0.004 * groove
        col = np.array([188, 94, 100]) - groove[:, None] * np.array([25, 15, 15])
        t = np.clip((pos[:, 2] - (c[2] - radii[2])) / (2 * radii[2]), 0, 1)
        ring = mb.add(pos, col, Part.TONGUE, ring=t)
        if len(prev):
            mb.strip(ring, prev, closed=True)
        prev = ring
    top = mb.add(c + np.array([0, radii[1], 0]), (180, 88, 94), Part.TONGUE, ring=0.5)
    mb.fan(int(top[0]), prev)


_HAIRLINE = np.array(
    [
        (0.0, 0.70),
        (0.4, 0.68),
        (0.75, 0.62),
        (0.95, 0.54),
        (1.1, 0.42),
        (1.22, 0.26),
        (1.3, 0.09),
        (1.36, -0.03),
        (1.6, -0.07),
        (2.2, -0.1),
        (np.pi, -0.12),
    ]
)
"""Where the hair starts, by |φ|: the forehead, down the sides of the face (a bob over the
ears) and round the back at the nape."""
PART_PHI = 0.42
"""The side parting, on the face's left."""


def hair(mb: MeshBuilder) -> None:
    """A chin-length bob with a side parting and a fringe swept across the forehead: a cap
    over the skull from the hairline to the crown, hanging straight down below the widest
    part of the head."""
    s = -1.0 + 2.0 * np.arange(68) / 68
    phi = np.pi * (0.45 * s + 0.55 * s**3)
    v = np.linspace(0.0, 1.0, 801)
    grid = surface(np.broadcast_to(phi[None, :], (len(v), len(phi))), v[:, None])
    ys = grid[..., 1]
    line_y = np.interp(np.abs(phi), _HAIRLINE[:, 0], _HAIRLINE[:, 1])
    fringe = np.exp(-(((phi + 0.2) / 0.38) ** 2)) * (np.cos(phi) > 0)
    line_y = line_y - 0.075 * fringe
    v_h = np.array([np.interp(line_y[j], ys[:, j], v) for j in range(len(phi))])
    axis = np.array([0.0, 0.0, -0.03])
    radius = np.hypot(grid[..., 0] - axis[0], grid[..., 2] - axis[2])
    widest = np.maximum.accumulate(radius[::-1], axis=0)[::-1]  # from the crown down
    u = np.array([0.0, 0.0, 0.03, 0.08, 0.15, 0.24, 0.35, 0.48, 0.62, 0.77, 0.9])
    front = np.maximum(np.cos(phi), 0.0)
    parting = np.exp(-(((phi - PART_PHI) / 0.07) ** 2))
    prev = np.zeros(0, np.int64)
    for k, uk in enumerate(u):
        vv = v_h + uk * (1.0 - v_h)
        pts = skin_point(phi, vv)
        grow = np.clip(uk / 0.12, 0, 1) ** 0.6
        thick = 0.03 + 0.012 * front**2 + 0.012 * fringe
        thick = thick * (1.0 - 0.45 * parting * np.clip((uk - 0.05) / 0.1, 0, 1))
        thick = np.where(k == 0, 0.0, 0.009 + 0.006 * fringe + thick * grow)
        rel = pts - axis
        r = np.hypot(rel[:, 0], rel[:, 2])
        hang = np.array([np.interp(vv[j], v, widest[:, j]) for j in range(len(phi))])
        target = np.where(k == 0, r, np.maximum(r + thick, hang + 0.8 * thick))
        pos = pts.copy()
        pos[:, 0] = axis[0] + rel[:, 0] / r * target
        pos[:, 2] = axis[2] + rel[:, 2] / r * target
        pos[:, 1] += np.where(k == 0, 0.0, thick * 0.5 + 0.01 * grow * front**2 - 0.03 * uk**2)
        sheen = 1.0 + 0.1 * np.clip(uk * 3, 0, 1) * np.cos((phi - PART_PHI) * 11.0)
        col = np.array(HAIR, np.float64)[None] * sheen[:, None] * (0.8 if k == 0 else 1.0)
        ring = mb.add(pos, col, Part.HAIR, ring=uk)
        if len(prev):
            mb.strip(ring, prev, closed=True)
        prev = ring
    crown = skin_point(np.zeros(1), np.ones(1))[0]
    top = mb.add(crown + np.array([0, 0.04, 0]), HAIR, Part.HAIR, ring=1.0)
    mb.fan(int(top[0]), prev)


def brows(mb: MeshBuilder) -> None:
    """Eyebrows: thin strips just off the skin, soft at their edges and their inner ends."""
    lm = LANDMARKS
    s = np.linspace(0.0, 1.0, 16)
    x = 0.05 + 0.212 * s
    y = lm.brow_y - 0.01 + 0.052 * s - 0.066 * s**2 + 0.02 * np.sin(np.pi * s) ** 2
    half = 0.0105 * (1 - s) ** 0.6 * (0.75 + 0.25 * np.clip(s / 0.12, 0, 1)) + 0.0035
    fade = 0.8 * (1 - np.clip(s / 0.22, 0, 1)) ** 1.3 + 0.35 * np.clip((s - 0.85) / 0.15, 0, 1)
    across = np.array([-1.0, -0.6, 0.0, 0.6, 1.0])
    mix = np.array([0.8, 0.2, 0.0, 0.25, 0.85])
    for side in (1, -1):
        rows = []
        for a, m in zip(across, mix, strict=True):
            px, py = side * x, y + a * half - 0.003 * a * s
            pts = skin_point(*invert(px, py))
            pts[:, 2] += 0.003
            blend = np.clip(m + fade * (1 - m), 0, 1)[:, None]
            col = np.array(BROW, np.float64) * (1 - blend) + np.array(SKIN, np.float64) * blend
            rows.append(mb.add(pts, col * (1 + 0.18 * s[:, None]), Part.BROW, xi=side))
        for k in range(len(rows) - 1):
            mb.strip(rows[k + 1][::side], rows[k][::side], closed=False)


def body(mb: MeshBuilder) -> None:
    """Shoulders and chest in a crew-neck top, open under the frame."""
    rings = [  # y, half width, half depth, z centre, superellipse exponent, colour
        (-0.48, 0.212, 0.186, -0.012, 2.0, (38, 58, 90)),
        (-0.42, 0.242, 0.21, -0.012, 2.0, (60, 88, 128)),
        (-0.435, 0.275, 0.222, -0.015, 2.1, CLOTH),
        (-0.465, 0.34, 0.23, -0.02, 2.3, CLOTH),
        (-0.525, 0.45, 0.236, -0.025, 2.6, CLOTH),
        (-0.59, 0.6, 0.246, -0.03, 3.0, CLOTH),
        (-0.665, 0.74, 0.256, -0.03, 3.3, CLOTH),
        (-0.75, 0.85, 0.264, -0.03, 3.4, CLOTH),
        (-0.87, 0.915, 0.27, -0.03, 3.2, CLOTH),
        (-0.98, 0.93, 0.277, -0.02, 3.0, CLOTH),
    ]
    seg = 40
    a = 2 * np.pi * np.arange(seg) / seg
    sa, ca = np.sin(a), np.cos(a)
    prev = np.zeros(0, np.int64)
    for y, hw, hd, zc, e, color in rings:
        x = hw * np.sign(sa) * np.abs(sa) ** (2 / e)
        z = zc + hd * np.sign(ca) * np.abs(ca) ** (2 / e)
        pos = np.stack([x, np.full(seg, y), z], 1)
        ring = mb.add(pos, color, Part.BODY)
        if len(prev):
            mb.strip(prev, ring, closed=True)
        prev = ring

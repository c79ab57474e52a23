"""The default head's geometry: a skin grid with ring patches for the eyes and the mouth.

The skin (:mod:`.head_shape`) is sampled on a (φ, v) grid: columns dense in front and sparse
behind, rows dense over the face. Three rectangles of the grid are cut out, round each eye
and round the mouth, and filled with ring patches: rings from the rectangle's border in to
the lid margin (the eye) or to the inner edge of the lips (the mouth), so the lids and the
lips have rings that follow their shape, and the morph targets (:mod:`.head_morphs`) can move
them ring by ring. The mouth's rings go on past the lips, back into the head, as the mouth's
cavity; the lid margin is tucked behind the eyeball. :mod:`.head_parts` adds the eyeballs,
teeth, tongue, hair, brows and shoulders. The result is a :class:`RawHead`: the mesh
and, per vertex, the tags the morph targets are computed from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.head_shape import LANDMARKS, features, invert, surface

__all__ = ["MeshBuilder", "Part", "RawHead", "build_head", "skin_point"]

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


class Part(IntEnum):
    SKIN = 0
    LIDS = 1
    LIPS = 2
    MOUTH = 3
    EYEBALL = 4
    TEETH_UPPER = 5
    TEETH_LOWER = 6
    TONGUE = 7
    HAIR = 8
    BROW = 9
    BODY = 10
    LASHES = 11


SKIN = (224, 170, 140)
LIP = (190, 102, 100)
LID = (218, 162, 138)
SCALP = (70, 50, 40)


@dataclass(slots=True, eq=False)
class RawHead:
    """The head before its morph targets are sparse: mesh arrays and per-vertex tags."""

    positions: F64
    colors: NDArray[np.uint8]
    indices: I64
    part: NDArray[np.int8]
    ring: F64
    """Where a vertex sits in its part. Lids: 0 at the margin out to 0.82 (the border is
    the grid's), the tuck behind the margin -0.05. Lips: t - 1 on the lip rings (-1 at the
    inner edge, 0 at the vermilion border), then the skin rings' share of the way out (> 0).
    Mouth (cavity): minus the depth behind the lips. Eyeball: the angle from the pupil.
    Tongue: 0 at the root to 1 at the tip. Hair: 0 at the hairline to 1 at the crown."""
    xi: F64
    """Patch vertices: cos of the angle round the feature (±1 at the corners)."""
    upper: NDArray[np.int8]
    """+1 upper lid or lip, -1 lower, 0 elsewhere."""
    anchor: I64
    """A vertex whose morph offsets this one follows (scaled by ``follow``), or -1."""
    follow: F64
    eye_centers: F64 = field(default_factory=lambda: np.zeros((2, 3)))
    """Centres of the left (+X) and right eyeball."""


class MeshBuilder:
    """Accumulates vertices with tags, and triangles."""

    def __init__(self) -> None:
        self._pos: list[F64] = []
        self._col: list[NDArray[np.uint8]] = []
        self._tags: dict[str, list[NDArray[np.generic]]] = {
            k: [] for k in ("part", "ring", "xi", "upper", "anchor", "follow")
        }
        self._tri: list[I64] = []
        self.count = 0
        self.eye_centers = np.zeros((2, 3))

    def add(
        self,
        pos: F64,
        color: tuple[int, int, int] | NDArray[np.generic],
        part: Part,
        *,
        ring: F64 | float = 0.0,
        xi: F64 | float = 0.0,
        upper: NDArray[np.generic] | int = 0,
        anchor: I64 | int = -1,
        follow: F64 | float = 0.0,
    ) -> I64:
        pos = np.asarray(pos, np.float64).reshape(-1, 3)
        n = len(pos)
        col = np.broadcast_to(np.asarray(color, np.float64), (n, 3))
        rgba = np.concatenate([np.clip(np.round(col), 0, 255), np.full((n, 1), 255.0)], axis=1)
        self._pos.append(pos)
        self._col.append(rgba.astype(np.uint8))
        tags = {"part": part, "ring": ring, "xi": xi, "upper": upper, "anchor": anchor}
        tags["follow"] = follow
        for name, value in tags.items():
            self._tags[name].append(np.broadcast_to(np.asarray(value), (n,)).copy())
        idx = np.arange(self.count, self.count + n, dtype=np.int64)
        self.count += n
        return idx

    def faces(self, tri: I64 | list[tuple[int, int, int]]) -> None:
        self._tri.append(np.asarray(tri, np.int64).reshape(-1, 3))

    def strip(self, inner: I64, outer: I64, *, closed: bool) -> None:
        """Quads between two rows of equal length (counter-clockwise seen from the side the
        rows' order turns counter-clockwise round, ``outer`` being farther out)."""
        a, d = inner, outer
        b, c = np.roll(inner, -1), np.roll(outer, -1)
        if not closed:
            a, b, c, d = a[:-1], b[:-1], c[:-1], d[:-1]
        self.faces(np.stack([np.stack([a, c, b], 1), np.stack([a, d, c], 1)], 1))

    def fan(self, center: int, ring: I64) -> None:
        """Triangles from ``center`` to a closed ring, oriented as :meth:`strip` with the
        centre as the inner row."""
        self.faces(np.stack([np.full_like(ring, center), ring, np.roll(ring, -1)], 1))

    def finish(self) -> RawHead:
        tags = {k: np.concatenate(v) for k, v in self._tags.items()}
        return RawHead(
            positions=np.concatenate(self._pos),
            colors=np.concatenate(self._col),
            indices=np.concatenate(self._tri),
            part=tags["part"].astype(np.int8),
            ring=tags["ring"].astype(np.float64),
            xi=tags["xi"].astype(np.float64),
            upper=tags["upper"].astype(np.int8),
            anchor=tags["anchor"].astype(np.int64),
            follow=tags["follow"].astype(np.float64),
            eye_centers=self.eye_centers.copy(),
        )


def skin_point(phi: F64, v: F64) -> F64:
    """The finished skin (with its features) at (φ, v)."""
    return features(surface(phi, v))


def _columns(n: int = 44, k: float = 0.24) -> F64:
    s = -1.0 + 2.0 * np.arange(n) / n
    return np.pi * (k * s + (1.0 - k) * s**5)


def _rows() -> F64:
    """Row v values: ~0.016 apart over the face, 0.011 round the nose tip, 0.045 elsewhere."""
    v = np.linspace(0.0, 1.0, 4001)
    front = surface(np.zeros_like(v), v)
    y = front[:, 1]
    ds = np.linalg.norm(np.diff(front[:, 1:], axis=0), axis=1)
    ym = 0.5 * (y[1:] + y[:-1])

    def window(lo: float, hi: float, ramp: float) -> F64:
        return np.clip((ym - lo) / ramp, 0, 1) * np.clip((hi - ym) / ramp, 0, 1)

    spacing = 0.05 - 0.032 * window(-0.36, 0.56, 0.07) - 0.005 * window(0.09, 0.2, 0.02)
    u = np.concatenate([[0.0], np.cumsum(ds / spacing)])
    rows = int(round(u[-1]))
    return np.interp(np.linspace(0.0, u[-1], rows + 1), u, v)


@dataclass(slots=True)
class _Grid:
    phi: F64
    v: F64
    index: I64
    """(rows, columns) vertex indices; the pole is separate."""
    pole: int


def _perimeter(i0: int, i1: int, j0: int, j1: int) -> list[tuple[int, int]]:
    """Grid (row, column) pairs round a rectangle of cells, counter-clockwise."""
    loop = [(i0, j) for j in range(j0, j1)]
    loop += [(i, j1) for i in range(i0, i1)]
    loop += [(i1, j) for j in range(j1, j0, -1)]
    loop += [(i, j0) for i in range(i1, i0, -1)]
    return loop


def _cell_range(values: F64, lo: float, hi: float) -> tuple[int, int]:
    inside = np.flatnonzero((values >= lo) & (values <= hi))
    return int(inside[0]), int(inside[-1])


def _skin_grid(
    mb: MeshBuilder, holes: list[tuple[float, float, float, float]]
) -> tuple[_Grid, list[tuple[int, int, int, int]]]:
    """The skin grid with rectangular holes (x0, x1, y0, y1 in front view)."""
    phi, v = _columns(), _rows()
    rows, cols = len(v) - 1, len(phi)
    pp, vv = np.meshgrid(phi, v[:-1])
    pts = skin_point(pp, vv)
    base = surface(pp, vv)
    color = _skin_color(pts)
    index = mb.add(pts.reshape(-1, 3), color.reshape(-1, 3), Part.SKIN).reshape(rows, cols)
    pole = int(mb.add(skin_point(np.zeros(1), np.ones(1)), SCALP, Part.SKIN)[0])
    keep = np.ones((rows - 1, cols), bool)
    rects = []
    for x0, x1, y0, y1 in holes:
        cx = 0.5 * (x0 + x1)
        jc = int(np.argmin(np.abs(base[rows // 2, :, 0] - cx) + 10 * (base[rows // 2, :, 2] < 0)))
        ic = int(np.argmin(np.abs(base[:, jc, 1] - 0.5 * (y0 + y1))))
        i0, i1 = _cell_range(base[:, jc, 1], y0, y1)
        j0, j1 = _cell_range(np.where(base[ic, :, 2] > 0, base[ic, :, 0], 9.0), x0, x1)
        keep[i0:i1, j0:j1] = False
        rects.append((i0, i1, j0, j1))
    for i in range(rows - 1):
        for j in range(cols):
            if not keep[i, j]:
                continue
            a, b = index[i, j], index[i, (j + 1) % cols]
            c, d = index[i + 1, (j + 1) % cols], index[i + 1, j]
            mb.faces([(a, b, c), (a, c, d)])
    mb.fan(pole, index[-1])
    return _Grid(phi, v, index, pole), rects


def _skin_color(pts: F64) -> F64:
    x, y, z = pts[..., 0], pts[..., 1], pts[..., 2]
    ax = np.abs(x)
    color = np.broadcast_to(np.array(SKIN, np.float64), pts.shape).copy()
    blush = np.exp(-(((ax - 0.22) / 0.08) ** 2) - ((y - 0.15) / 0.07) ** 2) * (z > 0)
    color += blush[..., None] * (np.array([224, 150, 135]) - color) * 0.45
    nose = np.exp(-((x / 0.04) ** 2) - ((y - 0.16) / 0.04) ** 2) * (z > 0)
    color += nose[..., None] * (np.array([222, 158, 138]) - color) * 0.5
    nostril = np.exp(-(((ax - 0.021) / 0.011) ** 2) - ((y - 0.125) / 0.0065) ** 2) * (z > 0.3)
    color += nostril[..., None] * (np.array([90, 45, 38]) - color) * 0.7
    # Baked occlusion: the neck under the jaw, the hollows beside the nose and mouth.
    under_jaw = np.clip((-0.24 - y) / 0.08, 0, 1) * np.clip((y + 0.6) / 0.2, 0, 1)
    shade = 1.0 - 0.22 * under_jaw * np.clip(z / 0.2 + 0.5, 0, 1)
    shade -= 0.08 * np.exp(-(((ax - 0.075) / 0.02) ** 2) - ((y - 0.14) / 0.03) ** 2) * (z > 0)
    shade -= 0.06 * np.exp(-(((ax - 0.125) / 0.02) ** 2) - ((y + 0.005) / 0.02) ** 2) * (z > 0)
    color *= shade[..., None]
    socket = np.exp(-(((ax - LANDMARKS.eye_x) / 0.08) ** 2) - ((y - 0.30) / 0.04) ** 2)
    color += (socket * (z > 0))[..., None] * (np.array([200, 150, 132]) - color) * 0.35
    return color


# -- ring patches ---------------------------------------------------------------------------


def _patch_params(
    grid: _Grid, rect: tuple[int, int, int, int], cx: float, cy: float
) -> tuple[I64, F64, F64, F64]:
    """Border vertices of a hole, their domain coordinates and their angle parameter."""
    i0, i1, j0, j1 = rect
    loop = _perimeter(i0, i1, j0, j1)
    ii = np.array([i for i, _ in loop])
    jj = np.array([j for _, j in loop])
    border = grid.index[ii, jj]
    phi, v = grid.phi[jj], grid.v[ii]
    pts = surface(phi, v)
    seg = np.linalg.norm(np.diff(np.vstack([pts, pts[:1]])[:, :2], axis=0), axis=1)
    tau = np.concatenate([[0.0], np.cumsum(seg)[:-1]]) / seg.sum()
    # Start the angle at the border point level with the centre on the +X side.
    right = np.flatnonzero(pts[:, 0] > cx)
    start = right[np.argmin(np.abs(pts[right, 1] - cy))]
    beta = 2.0 * np.pi * ((tau - tau[start]) % 1.0)
    return border, phi, v, beta


def _domain_rings(
    inner_phi: F64, inner_v: F64, border_phi: F64, border_v: F64, steps: F64
) -> tuple[F64, F64]:
    s = steps[:, None]
    return inner_phi + (border_phi - inner_phi) * s, inner_v + (border_v - inner_v) * s


def _eye(mb: MeshBuilder, grid: _Grid, rect: tuple[int, int, int, int], side: int) -> None:
    """The lids round the eye on ``side`` (+1 the face's left, +X)."""
    from kefu.ai_bridge.avatar.head_parts import eyeball

    lm = LANDMARKS
    cx, cy = side * lm.eye_x, lm.eye_y
    border, bphi, bv, beta = _patch_params(grid, rect, cx, cy)
    lateral = side * np.cos(beta)
    sb = np.sin(beta)
    up = sb > 1e-9
    height = np.where(up, 0.043 * (1 - 0.14 * lateral), 0.027 * (1 + 0.22 * lateral))
    mx = cx + lm.eye_half_width * np.cos(beta) * (1 + 0.03 * (lateral < 0))
    my = cy + 0.007 * lateral + height * sb * (1 - 0.12 * np.cos(beta) ** 4)
    mphi, mv = invert(mx, my)
    steps = np.array([0.0, 0.06, 0.13, 0.22, 0.33, 0.47, 0.64, 0.82])
    rphi, rv = _domain_rings(mphi, mv, bphi, bv, steps)
    pts = skin_point(rphi, rv)
    center_skin = skin_point(*invert(np.array([cx]), np.array([cy])))[0]
    r = lm.eyeball_radius
    center = np.array([cx, cy - 0.004, center_skin[2] - 0.003 - r])
    mb.eye_centers[0 if side > 0 else 1] = center
    radial = pts - center
    dist = np.linalg.norm(radial, axis=-1, keepdims=True)
    lid_r = r + np.where(up, 0.0085, 0.0055)[None, :, None]
    # The margin hugs the eyeball, except in the corners, which would sink too deep: there
    # the tuck below shows as the pink corner of the eye.
    corner = np.exp(-(((np.abs(np.cos(beta)) - 1.0) / 0.15) ** 2))
    outer = side * np.cos(beta) > 0
    keep = 1.0 - 0.5 * corner * (1.0 - 0.6 * outer)
    conform = np.exp(-((steps / 0.085) ** 2))[:, None] * keep[None, :]
    pts = pts + conform[..., None] * (center + radial / dist * lid_r - pts)
    # The crease of the upper lid.
    crease = np.interp(steps, [0.06, 0.22, 0.33, 0.47, 0.64], [0, 0.7, 1, 0.3, 0])[:, None]
    pts[..., 2] -= 0.0035 * crease * np.maximum(sb, 0.0)[None, :] ** 1.5
    upper = np.where(up, 1, np.where(sb < -1e-9, -1, 0))
    color = np.broadcast_to(np.array(LID, np.float64), pts.shape).copy()
    color[0] = np.where(up[:, None], (52, 36, 32), (176, 112, 104))
    color[1] = np.where(up[:, None], (150, 102, 88), LID)
    skin_far = _skin_color(pts[4:])
    color[4:] = skin_far
    color[3] = 0.5 * (color[3] + skin_far[0])
    rows = [
        mb.add(pts[k], color[k], Part.LIDS, ring=steps[k], xi=np.cos(beta), upper=upper)
        for k in range(len(steps))
    ]
    rows.append(border)
    for k in range(len(rows) - 1):
        mb.strip(rows[k], rows[k + 1], closed=True)
    # The margin's inner edge, tucked behind it against the eyeball.
    tuck_pos = center + (pts[0] - center) / np.linalg.norm(pts[0] - center, axis=-1)[:, None] * (
        r - 0.004
    )
    tuck_pos[:, 1] += -0.004 * np.sign(sb)
    tuck_col = np.where(up[:, None], (40, 28, 26), (160, 92, 88)).astype(np.float64)
    medial = corner * (side * np.cos(beta) < 0)
    tuck_col += medial[:, None] * (np.array([196, 118, 112]) - tuck_col)
    tuck = mb.add(
        tuck_pos,
        tuck_col,
        Part.LIDS,
        ring=-0.05,
        xi=np.cos(beta),
        upper=upper,
        anchor=rows[0],
        follow=1.0,
    )
    mb.strip(tuck, rows[0], closed=True)
    # Lashes: a short dark fringe along the upper margin.
    lash_rows = np.flatnonzero(up & (np.abs(np.cos(beta)) < 0.95))  # contiguous, in order
    root = pts[0][lash_rows]
    base = mb.add(root, (35, 25, 22), Part.LASHES, anchor=rows[0][lash_rows], follow=1.0, upper=1)
    along = np.abs(np.cos(beta[lash_rows])) / 0.95
    length = 0.009 * (1.0 - along**3) * (1.0 + 0.3 * (side * np.cos(beta[lash_rows]) > 0))
    tip = root + np.array([0.0, 0.75, 0.66]) * length[:, None]
    lash = mb.add(tip, (35, 25, 22), Part.LASHES, anchor=rows[0][lash_rows], follow=1.0, upper=1)
    mb.strip(base, lash, closed=False)
    eyeball(mb, center, r, side)


def _lip_contours(beta: F64) -> tuple[F64, F64, F64, F64]:
    """Inner lip edge and vermilion border (x, y) at angle parameter ``beta``."""
    lm = LANDMARKS
    xi, sb = np.cos(beta), np.sin(beta)
    w = lm.mouth_half_width
    ax = np.abs(xi)
    upper = 0.029 * (1 - xi**2) ** 0.55 + 0.0065 * np.exp(-(((ax - 0.2) / 0.11) ** 2))
    upper -= 0.006 * np.exp(-((xi / 0.075) ** 2))
    lower = 0.04 * (1 - xi**2) ** 0.5
    lift = 0.007 * np.abs(xi) ** 4  # the corners turn up a little: a friendly rest face
    vx = w * xi
    vy = lm.mouth_y + np.where(sb >= 0, upper, -lower) + lift
    ix = 0.97 * w * xi
    iy = lm.mouth_y + lift
    return ix, iy, vx, vy


def _mouth(mb: MeshBuilder, grid: _Grid, rect: tuple[int, int, int, int]) -> None:
    lm = LANDMARKS
    border, bphi, bv, beta = _patch_params(grid, rect, 0.0, lm.mouth_y)
    xi, sb = np.cos(beta), np.sin(beta)
    up = sb > 1e-9
    upper = np.where(up, 1, np.where(sb < -1e-9, -1, 0))
    ix, iy, vx, vy = _lip_contours(beta)
    taper = np.sqrt(np.clip(1 - xi**2, 0, 1))
    corner = np.exp(-(((np.abs(xi) - 1) / 0.1) ** 2))
    # Lip rings from the inner edge (t = 0) to the vermilion border (t = 1).
    lip_t = np.array([0.0, 0.1, 0.25, 0.45, 0.65, 0.82, 0.93, 1.0])
    lip_dz_up = np.array([-0.010, 0.004, 0.015, 0.021, 0.021, 0.016, 0.008, 0.002])
    lip_dz_lo = np.array([-0.010, 0.005, 0.018, 0.026, 0.027, 0.021, 0.011, 0.003])
    lx = ix + (vx - ix) * lip_t[:, None]
    ly = iy + (vy - iy) * lip_t[:, None]
    lphi, lv = invert(lx, ly)
    pts = skin_point(lphi, lv)
    dz = np.where(up, lip_dz_up[:, None], lip_dz_lo[:, None]) * taper**0.6
    pts[..., 2] += dz - 0.012 * corner
    pts[0, :, 1] = iy  # the inner edges meet along the mouth line
    rows = []
    for k, t in enumerate(lip_t):
        shade = np.clip(1.0 - t, 0, 1)[None]
        color = np.array(LIP) * (1 - 0.18 * shade) + np.array([0, 0, 0]) * shade
        color = np.broadcast_to(color, (len(beta), 3)).copy()
        color[np.abs(xi) > 0.985] = np.array(LIP) * 0.8 + np.array(SKIN) * 0.2
        rows.append(mb.add(pts[k], color, Part.LIPS, ring=t - 1.0, xi=xi, upper=upper))
    # Skin rings from the vermilion border out to the border of the hole.
    steps = np.array([0.1, 0.24, 0.42, 0.66])
    vphi, vv = lphi[-1], lv[-1]
    sphi, sv = _domain_rings(vphi, vv, bphi, bv, steps)
    spts = skin_point(sphi, sv)
    spts[0, :, 2] += 0.0025 * taper - 0.008 * corner
    spts[1, :, 2] -= 0.004 * corner
    for k, s in enumerate(steps):
        rows.append(mb.add(spts[k], _skin_color(spts[k]), Part.LIPS, ring=s, xi=xi, upper=upper))
    rows.append(border)
    for k in range(len(rows) - 1):
        mb.strip(rows[k], rows[k + 1], closed=True)
    _cavity(mb, rows[0], pts[0], xi, sb, upper)


def _cavity(mb: MeshBuilder, rim: I64, rim_pos: F64, xi: F64, sb: F64, upper: F64) -> None:
    """The mouth's inside: rings from the inner lip edge back into the head, closed."""
    lm = LANDMARKS
    front_z = float(rim_pos[np.argmax(np.abs(sb)), 2])
    sign = np.sign(sb)
    spec = [  # (x scale, y spread, z back from the lip edge, colour, follow)
        (0.99, 0.007, 0.012, (130, 52, 58), 1.0),
        (0.97, 0.036, 0.030, (92, 34, 40), 0.6),
        (0.9, 0.06, 0.075, (52, 18, 22), 0.3),
        (0.75, 0.065, 0.14, (30, 10, 12), 0.1),
        (0.45, 0.05, 0.2, (18, 6, 8), 0.0),
    ]
    prev = rim
    for scale, spread, back, color, follow in spec:
        pos = np.stack(
            [
                rim_pos[:, 0] * scale,
                lm.mouth_y + sign * spread * np.abs(sb) ** 0.5,
                np.minimum(rim_pos[:, 2], front_z) - back,
            ],
            axis=1,
        )
        ring = mb.add(
            pos, color, Part.MOUTH, ring=-back, xi=xi, upper=upper, anchor=rim, follow=follow
        )
        mb.strip(ring, prev, closed=True)
        prev = ring
    end = mb.add(np.array([0.0, lm.mouth_y, front_z - 0.23]), (14, 4, 6), Part.MOUTH, ring=-0.23)
    mb.fan(int(end[0]), prev)


def build_head() -> RawHead:
    """The default head (see the module doc)."""
    from kefu.ai_bridge.avatar import head_parts

    lm = LANDMARKS
    mb = MeshBuilder()
    ex, ey = lm.eye_x, lm.eye_y
    eye_box = (0.115, 0.108, 0.075, 0.088)  # medial, lateral, below, above the centre
    holes = [
        (ex - eye_box[0], ex + eye_box[1], ey - eye_box[2], ey + eye_box[3]),
        (-ex - eye_box[1], -ex + eye_box[0], ey - eye_box[2], ey + eye_box[3]),
        (-0.2, 0.2, lm.mouth_y - 0.1, lm.mouth_y + 0.095),
    ]
    grid, rects = _skin_grid(mb, holes)
    _eye(mb, grid, rects[0], +1)
    _eye(mb, grid, rects[1], -1)
    _mouth(mb, grid, rects[2])
    head_parts.teeth(mb)
    head_parts.tongue(mb)
    head_parts.hair(mb)
    head_parts.brows(mb)
    head_parts.body(mb)
    return mb.finish()

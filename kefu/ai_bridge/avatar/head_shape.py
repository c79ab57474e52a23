"""The default head's skin as a smooth function: profiles, feature offsets, landmarks.

The skin is a surface over a (φ, v) domain. ``v`` runs from the bottom of the neck (0) to the
crown (1) along "rings" that go round the head: horizontal on the skull, tilted along the jaw
line below the mouth (front low under the chin, sides high at the jaw angle). ``φ`` goes
round each ring: 0 in front, ±π/2 at the sides, ±π behind. Each ring is given by its front
point, its side points and its back point (:data:`RINGS`, monotone cubic interpolation
between them); :func:`surface` blends between them with superellipse-like exponents, then
:func:`features` adds the nose, eye sockets, brow ridge, cheekbones, the muzzle round the
mouth and the chin as smooth offsets of the base point. Everything here is a pure function
of its arguments (numpy, vectorised) and the frame of :mod:`.head_mesh`: +Y up, +Z toward
the camera, the face's left at +X.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EYE",
    "LANDMARKS",
    "MOUTH",
    "Landmarks",
    "features",
    "invert",
    "pchip",
    "ring_v",
    "surface",
]

F64 = NDArray[np.float64]

# Rings from the bottom of the neck to the crown. Columns: front y, front z, side y, side z,
# half width, back y, back z, front exponent (1 ellipse, <1 flat face, >1 pointed chin).
RINGS = np.array(
    [
        (-0.80, 0.180, -0.80, -0.01, 0.230, -0.80, -0.190, 1.0),
        (-0.54, 0.186, -0.54, -0.02, 0.228, -0.50, -0.197, 1.0),
        (-0.405, 0.200, -0.30, -0.03, 0.226, -0.30, -0.207, 1.0),
        (-0.322, 0.268, -0.165, -0.045, 0.252, -0.17, -0.232, 1.1),
        (-0.265, 0.338, -0.098, -0.058, 0.290, -0.05, -0.280, 1.15),
        (-0.212, 0.390, -0.035, -0.064, 0.318, 0.03, -0.335, 1.15),
        (-0.150, 0.420, 0.035, -0.065, 0.334, 0.10, -0.390, 1.15),
        (-0.088, 0.414, 0.085, -0.065, 0.343, 0.16, -0.430, 1.1),
        (-0.042, 0.432, 0.118, -0.065, 0.350, 0.205, -0.458, 1.05),
        (0.000, 0.445, 0.147, -0.065, 0.357, 0.245, -0.478, 1.0),
        (0.060, 0.448, 0.182, -0.065, 0.376, 0.285, -0.497, 0.92),
        (0.120, 0.440, 0.212, -0.062, 0.390, 0.325, -0.507, 0.82),
        (0.220, 0.425, 0.264, -0.058, 0.406, 0.375, -0.517, 0.72),
        (0.340, 0.405, 0.340, -0.050, 0.406, 0.445, -0.520, 0.7),
        (0.430, 0.432, 0.430, -0.042, 0.402, 0.515, -0.508, 0.72),
        (0.550, 0.432, 0.550, -0.034, 0.392, 0.605, -0.482, 0.8),
        (0.670, 0.400, 0.670, -0.028, 0.366, 0.700, -0.435, 0.88),
        (0.780, 0.330, 0.780, -0.025, 0.336, 0.790, -0.375, 0.92),
        (0.870, 0.235, 0.870, -0.025, 0.272, 0.870, -0.290, 0.95),
        (0.930, 0.130, 0.930, -0.026, 0.175, 0.930, -0.180, 1.0),
        (0.955, -0.030, 0.955, -0.030, 0.000, 0.955, -0.030, 1.0),
    ]
)


def _knots() -> F64:
    """The v of each ring: cumulative chord length of the front profile, normalised."""
    front = RINGS[:, :2]
    steps = np.linalg.norm(np.diff(front, axis=0), axis=1)
    knots: F64 = np.concatenate([[0.0], np.cumsum(steps)])
    knots /= knots[-1]
    return knots


KNOTS = _knots()


def pchip(x: F64, xs: F64, ys: F64) -> F64:
    """Monotone cubic interpolation (Fritsch-Carlson) of the points (xs, ys) at ``x``."""
    h = np.diff(xs)
    delta = np.diff(ys, axis=0) / h[:, None] if ys.ndim == 2 else np.diff(ys) / h
    slopes = np.zeros_like(ys)
    inner = delta[:-1] * delta[1:] > 0
    w1 = 2 * h[1:] + h[:-1]
    w2 = h[1:] + 2 * h[:-1]
    if ys.ndim == 2:
        w1, w2 = w1[:, None], w2[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        harmonic = (w1 + w2) / (w1 / delta[:-1] + w2 / delta[1:])
    slopes[1:-1] = np.where(inner, harmonic, 0.0)
    slopes[0], slopes[-1] = delta[0], delta[-1]
    i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    t = (x - xs[i]) / h[i]
    hi = h[i]
    if ys.ndim == 2:
        t, hi = t[:, None], hi[:, None]
    t2, t3 = t * t, t * t * t
    out: F64 = (
        (2 * t3 - 3 * t2 + 1) * ys[i]
        + (t3 - 2 * t2 + t) * hi * slopes[i]
        + (-2 * t3 + 3 * t2) * ys[i + 1]
        + (t3 - t2) * hi * slopes[i + 1]
    )
    return out


def ring_v(index: float) -> float:
    """The v of ring ``index`` of :data:`RINGS` (fractional: between rings)."""
    return float(np.interp(index, np.arange(len(KNOTS)), KNOTS))


def surface(phi: F64, v: F64) -> F64:
    """Base skin points (…, 3) at (φ, v), before :func:`features`."""
    phi, v = np.broadcast_arrays(np.asarray(phi, np.float64), np.asarray(v, np.float64))
    shape = phi.shape
    phi, v = phi.reshape(-1), np.clip(v.reshape(-1), 0.0, 1.0)
    prof = pchip(v, KNOTS, RINGS)
    yf, zf, ys, zs, half, yb, zb, pf = prof.T
    c, s = np.cos(phi), np.sin(phi)
    front = np.maximum(c, 0.0)
    back = np.maximum(-c, 0.0)
    x = half * s * (1.0 + 0.06 * front * (1 - front))
    zfront = zs + (zf - zs) * front ** np.maximum(pf, 0.3)
    zback = zs + (zb - zs) * back**0.95
    z = np.where(c >= 0, zfront, zback)
    yfront = ys + (yf - ys) * front**1.6
    yback = ys + (yb - ys) * back**1.3
    y = np.where(c >= 0, yfront, yback)
    out: F64 = np.stack([x, y, z], axis=-1).reshape(*shape, 3)
    return out


def _bump(x: F64, y: F64, cx: float, cy: float, rx: float, ry: float) -> F64:
    return np.exp(-(((x - cx) / rx) ** 2) - ((y - cy) / ry) ** 2)


@dataclass(frozen=True, slots=True)
class Landmarks:
    """Where the features are (the face's left side; the right mirrors x)."""

    eye_x: float = 0.160
    eye_y: float = 0.338
    eye_half_width: float = 0.081
    eyeball_radius: float = 0.086
    mouth_y: float = -0.004
    mouth_half_width: float = 0.118
    nose_tip_y: float = 0.165
    subnasale_y: float = 0.118
    brow_y: float = 0.438
    hinge: tuple[float, float] = (0.20, -0.10)
    """Jaw hinge (y, z): the axis along X the jaw turns about."""


LANDMARKS = Landmarks()
EYE = (LANDMARKS.eye_x, LANDMARKS.eye_y)
MOUTH = (0.0, LANDMARKS.mouth_y)

_NOSE_Y = np.array([0.10, 0.118, 0.132, 0.148, 0.165, 0.19, 0.24, 0.30, 0.36, 0.42])
_NOSE_H = np.array([0.0, 0.035, 0.095, 0.13, 0.142, 0.128, 0.092, 0.055, 0.022, 0.0])
_NOSE_W = np.array([0.04, 0.048, 0.052, 0.05, 0.042, 0.036, 0.031, 0.028, 0.03, 0.04])


def features(p: F64) -> F64:
    """The skin with its features: ``p`` (…, 3) base points → displaced points."""
    x, y, z = p[..., 0], p[..., 1], p[..., 2]
    ax = np.abs(x)
    front = np.clip(z / 0.2, 0.0, 1.0) ** 2
    lm = LANDMARKS
    dz = np.zeros_like(x)
    dx = np.zeros_like(x)
    # Nose: a ridge from the nasion to the tip, a rounded tip, the wings.
    yy = np.clip(y, _NOSE_Y[0], _NOSE_Y[-1])
    height = np.interp(yy, _NOSE_Y, _NOSE_H) * ((y > _NOSE_Y[0]) & (y < _NOSE_Y[-1]))
    width = np.interp(yy, _NOSE_Y, _NOSE_W)
    dz += height * np.exp(-((x / width) ** 2) * 1.3)
    dz += 0.042 * _bump(ax, y, 0.047, 0.138, 0.026, 0.024)
    dz -= 0.012 * _bump(ax, y, 0.075, 0.135, 0.012, 0.03)
    # Eye sockets, brow ridge, the upper lid's hollow.
    dz -= 0.030 * _bump(ax, y, lm.eye_x, lm.eye_y + 0.005, 0.085, 0.058)
    dz += 0.024 * _bump(ax, y, 0.15, lm.brow_y + 0.005, 0.13, 0.035)
    dz += 0.010 * _bump(ax, y, 0.0, 0.45, 0.08, 0.05)
    # Cheekbones and cheeks, temples.
    bone = _bump(ax, y, 0.25, 0.215, 0.085, 0.065)
    dz += 0.022 * bone
    dx += np.sign(x) * 0.012 * bone
    dz += 0.012 * _bump(ax, y, 0.19, 0.1, 0.07, 0.08)
    dz -= 0.014 * _bump(ax, y, 0.29, 0.05, 0.06, 0.08)
    dx -= np.sign(x) * 0.012 * _bump(ax, y, 0.37, 0.5, 0.06, 0.08)
    # Muzzle, philtrum, chin, the groove under the lower lip.
    dz += 0.032 * _bump(x, y, 0.0, lm.mouth_y + 0.01, 0.14, 0.085)
    dz -= 0.005 * _bump(x, y, 0.0, 0.075, 0.011, 0.03)
    dz += 0.016 * _bump(x, y, 0.0, -0.17, 0.065, 0.042)
    dz -= 0.010 * _bump(x, y, 0.0, -0.083, 0.075, 0.017)
    # Nasolabial folds: shallow grooves from the nose wings to past the mouth corners.
    t = np.clip((0.13 - y) / 0.17, 0.0, 1.0)
    line_x = 0.085 + 0.065 * t
    dz -= 0.007 * np.exp(-(((ax - line_x) / 0.014) ** 2)) * (y < 0.13) * (y > -0.06) * (1 - t)
    out = p.copy()
    out[..., 0] += dx * front
    out[..., 2] += dz * front
    return out


@functools.cache
def _seeds() -> tuple[F64, F64, F64]:
    """A coarse table of front points to start :func:`invert`'s Newton steps from."""
    grid_phi, grid_v = np.meshgrid(np.linspace(-1.4, 1.4, 29), np.linspace(0.0, 1.0, 81))
    pts = surface(grid_phi, grid_v).reshape(-1, 3)[:, :2]
    return grid_phi.reshape(-1), grid_v.reshape(-1), pts


def invert(x: F64, y: F64, *, phi0: F64 | None = None, v0: F64 | None = None) -> tuple[F64, F64]:
    """The (φ, v) whose base point has front-view coordinates (x, y), for the front half."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if phi0 is None or v0 is None:
        grid_phi, grid_v, pts = _seeds()
        target = np.stack([x.reshape(-1), y.reshape(-1)], axis=1)
        d2 = (target[:, 0, None] - pts[None, :, 0]) ** 2 + (
            target[:, 1, None] - pts[None, :, 1]
        ) ** 2
        nearest = np.argmin(d2, axis=1)
        phi = grid_phi[nearest].reshape(x.shape)
        v = grid_v[nearest].reshape(x.shape)
    else:
        phi, v = phi0.copy(), v0.copy()
    eps = 1e-5
    for _ in range(12):
        base = surface(phi, v)[..., :2]
        dphi = (surface(phi + eps, v)[..., :2] - base) / eps
        dv = (surface(phi, v + eps)[..., :2] - base) / eps
        rx, ry = x - base[..., 0], y - base[..., 1]
        det = dphi[..., 0] * dv[..., 1] - dphi[..., 1] * dv[..., 0]
        det = np.where(np.abs(det) < 1e-12, 1e-12, det)
        phi = phi + (rx * dv[..., 1] - ry * dv[..., 0]) / det
        v = np.clip(v + (dphi[..., 0] * ry - dphi[..., 1] * rx) / det, 0.0, 1.0)
    return phi, v

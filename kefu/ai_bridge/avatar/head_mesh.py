"""The avatar's head as a triangle mesh with the 52 ARKit morph targets, and its wire format.

A :class:`HeadMesh` is what the server-side renderer (:mod:`.render`) draws and what the
caller page's canvas fetches (``kefu/web/avatar_mesh.js``): neutral positions, normals and
RGBA colours per vertex, triangles, and one sparse morph target per ARKit blendshape in
:data:`~.arkit.BLENDSHAPES` order (the vertices it moves and their offsets at weight 1). The
frame: the head within about [-1, 1], +Y up, +Z toward the camera, the face looking along +Z;
the face's left is +X (the viewer's right).

:func:`default_head` is kefu's own parametric head (:mod:`.head_build`, :mod:`.head_morphs`),
built in numpy on first use and cached; :mod:`.head_gltf` loads an operator's GLB instead.

Wire format (docs/avatar-mesh.md), all little-endian::

    0   4      magic b"KFHM"
    4   1      u8 version (1)
    5   3      zero
    8   4      u32 N vertices
    12  4      u32 M triangles
    16  4      u32 K morph targets (52)
    20  12N    float32 positions      then 12N float32 normals, 4N u8 RGBA, 12M u32 indices
    then K times: u32 C, C u32 vertex indices, 12C float32 deltas

:meth:`HeadMesh.from_wire` is strict: any inconsistency raises :class:`AvatarAssetError`.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import COUNT
from kefu.errors import LocalError

__all__ = [
    "MAGIC",
    "MAX_VERTICES",
    "VERSION",
    "AvatarAssetError",
    "HeadMesh",
    "MorphTarget",
    "default_head",
]

MAGIC = b"KFHM"
VERSION = 1
HEADER = struct.Struct("<4sB3sIII")
MAX_VERTICES = 1_000_000
"""Largest vertex (and triangle) count :meth:`HeadMesh.from_wire` accepts."""


class AvatarAssetError(LocalError, ValueError):
    """A head mesh (an operator's GLB, or bytes in the wire format) is unusable; the message
    says what is wrong."""


@dataclass(frozen=True, slots=True, eq=False)
class MorphTarget:
    """One blendshape: the vertices it moves and their offsets at weight 1."""

    indices: NDArray[np.uint32]
    """(C,) distinct vertex indices."""
    deltas: NDArray[np.float32]
    """(C, 3) offsets, in the mesh's units."""

    @classmethod
    def empty(cls) -> MorphTarget:
        return cls(np.zeros(0, np.uint32), np.zeros((0, 3), np.float32))

    @classmethod
    def from_dense(
        cls, deltas: NDArray[np.floating[Any]], *, tolerance: float = 1e-6
    ) -> MorphTarget:
        """The vertices of an (N, 3) offset array that move more than ``tolerance``."""
        moved = np.flatnonzero(np.abs(deltas).max(axis=1) > tolerance)
        return cls(moved.astype(np.uint32), deltas[moved].astype(np.float32))

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def _frozen(array: NDArray[np.generic]) -> NDArray[np.generic]:
    array = np.ascontiguousarray(array)
    array.setflags(write=False)
    return array


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise AvatarAssetError(message)


@dataclass(frozen=True, slots=True, eq=False)
class HeadMesh:
    """A head mesh with ARKit morph targets (see the module doc). Arrays are read-only."""

    positions: NDArray[np.float32]
    """(N, 3) neutral positions."""
    normals: NDArray[np.float32]
    """(N, 3) unit normals of the neutral face."""
    colors: NDArray[np.uint8]
    """(N, 4) sRGB colours and alpha (255: opaque)."""
    indices: NDArray[np.uint32]
    """(M, 3) triangles, counter-clockwise seen from outside."""
    morphs: tuple[MorphTarget, ...]
    """52 targets in ARKit order."""

    def __post_init__(self) -> None:
        n = self.positions.shape[0] if self.positions.ndim == 2 else 0
        _check(self.positions.dtype == np.float32, "positions must be float32")
        _check(self.positions.shape == (n, 3) and n > 0, "positions must be (N, 3), N > 0")
        _check(self.normals.dtype == np.float32, "normals must be float32")
        _check(self.normals.shape == (n, 3), f"normals must be ({n}, 3)")
        _check(self.colors.dtype == np.uint8, "colors must be uint8")
        _check(self.colors.shape == (n, 4), f"colors must be ({n}, 4)")
        _check(self.indices.dtype == np.uint32, "indices must be uint32")
        _check(
            self.indices.ndim == 2 and self.indices.shape[1] == 3 and self.indices.shape[0] > 0,
            "indices must be (M, 3), M > 0",
        )
        _check(int(self.indices.max()) < n, f"a triangle index is out of range ({n} vertices)")
        _check(bool(np.isfinite(self.positions).all()), "positions are not all finite")
        _check(bool(np.isfinite(self.normals).all()), "normals are not all finite")
        _check(len(self.morphs) == COUNT, f"expected {COUNT} morph targets, got {len(self.morphs)}")
        for k, morph in enumerate(self.morphs):
            c = morph.indices.shape[0] if morph.indices.ndim == 1 else -1
            _check(morph.indices.dtype == np.uint32, f"morph {k}: indices must be uint32")
            _check(morph.deltas.dtype == np.float32, f"morph {k}: deltas must be float32")
            _check(c >= 0 and morph.deltas.shape == (c, 3), f"morph {k}: shapes disagree")
            if c:
                _check(int(morph.indices.max()) < n, f"morph {k}: a vertex index is out of range")
                _check(len(np.unique(morph.indices)) == c, f"morph {k}: repeated vertex indices")
                _check(bool(np.isfinite(morph.deltas).all()), f"morph {k}: deltas not all finite")
        for name in ("positions", "normals", "colors", "indices"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        for morph in self.morphs:
            object.__setattr__(morph, "indices", _frozen(morph.indices))
            object.__setattr__(morph, "deltas", _frozen(morph.deltas))

    @property
    def vertex_count(self) -> int:
        return int(self.positions.shape[0])

    @property
    def triangle_count(self) -> int:
        return int(self.indices.shape[0])

    def blend(self, weights: NDArray[np.floating[Any]]) -> NDArray[np.float32]:
        """Positions with the morphs applied at ``weights`` (52, ARKit order), on the CPU."""
        weights = np.asarray(weights, np.float32)
        if weights.shape != (COUNT,):
            raise ValueError(f"expected {COUNT} weights, got shape {weights.shape}")
        out = self.positions.copy()
        for k in np.flatnonzero(weights):
            morph = self.morphs[k]
            out[morph.indices] += weights[k] * morph.deltas
        return out

    def to_wire(self) -> bytes:
        """The mesh in the binary format of the module doc (docs/avatar-mesh.md)."""
        parts = [
            HEADER.pack(MAGIC, VERSION, b"\0\0\0", self.vertex_count, self.triangle_count, COUNT),
            self.positions.astype("<f4").tobytes(),
            self.normals.astype("<f4").tobytes(),
            self.colors.tobytes(),
            self.indices.astype("<u4").tobytes(),
        ]
        for morph in self.morphs:
            parts.append(struct.pack("<I", len(morph)))
            parts.append(morph.indices.astype("<u4").tobytes())
            parts.append(morph.deltas.astype("<f4").tobytes())
        return b"".join(parts)

    @classmethod
    def from_wire(cls, data: bytes) -> HeadMesh:
        """Parse :meth:`to_wire`'s format; :class:`AvatarAssetError` on any inconsistency."""
        view = memoryview(data)
        _check(len(view) >= HEADER.size, f"truncated: {len(view)} bytes, the header needs 20")
        magic, version, zero, n, m, k = HEADER.unpack_from(view, 0)
        _check(magic == MAGIC, f"bad magic {bytes(magic)!r}")
        _check(version == VERSION, f"unsupported version {version}")
        _check(zero == b"\0\0\0", "header bytes 5-7 must be zero")
        _check(0 < n <= MAX_VERTICES, f"vertex count {n} outside 1..{MAX_VERTICES}")
        _check(0 < m <= 4 * MAX_VERTICES, f"triangle count {m} out of range")
        _check(k == COUNT, f"expected {COUNT} morph targets, got {k}")
        offset = HEADER.size

        def take(dtype: str, count: int, what: str) -> NDArray[np.generic]:
            nonlocal offset
            size = np.dtype(dtype).itemsize * count
            _check(offset + size <= len(view), f"truncated in {what} at offset {offset}")
            array = np.frombuffer(view, dtype, count, offset)
            offset += size
            return array

        positions = take("<f4", 3 * n, "positions").reshape(n, 3).astype(np.float32)
        normals = take("<f4", 3 * n, "normals").reshape(n, 3).astype(np.float32)
        colors = take("u1", 4 * n, "colors").reshape(n, 4).astype(np.uint8)
        indices = take("<u4", 3 * m, "indices").reshape(m, 3).astype(np.uint32)
        morphs = []
        for j in range(k):
            (c,) = take("<u4", 1, f"morph {j} count")
            _check(int(c) <= n, f"morph {j} moves {c} vertices of {n}")
            morph_indices = take("<u4", int(c), f"morph {j} indices").astype(np.uint32)
            deltas = take("<f4", 3 * int(c), f"morph {j} deltas").reshape(-1, 3)
            morphs.append(MorphTarget(morph_indices, deltas.astype(np.float32)))
        _check(offset == len(view), f"{len(view) - offset} bytes after the last morph")
        return cls(positions, normals, colors, indices, tuple(morphs))


def vertex_normals(
    positions: NDArray[np.floating[Any]], indices: NDArray[np.integer[Any]]
) -> NDArray[np.float32]:
    """Area-weighted unit vertex normals (a vertex on no triangle gets +Z)."""
    p = np.asarray(positions, np.float64)
    tri = np.asarray(indices, np.int64)
    face = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    flat = tri.reshape(-1)
    sums = np.stack(
        [np.bincount(flat, np.repeat(face[:, axis], 3), minlength=len(p)) for axis in range(3)],
        axis=1,
    )
    length = np.linalg.norm(sums, axis=1)
    sums[length < 1e-12] = (0.0, 0.0, 1.0)
    length[length < 1e-12] = 1.0
    out: NDArray[np.float32] = (sums / length[:, None]).astype(np.float32)
    return out


@functools.cache
def default_head() -> HeadMesh:
    """kefu's own parametric head (docs/avatar-mesh.md), built once per process."""
    from kefu.ai_bridge.avatar.head_build import build_head
    from kefu.ai_bridge.avatar.head_morphs import morph_targets

    raw = build_head()
    morphs = morph_targets(raw)
    normals = vertex_normals(raw.positions, raw.indices)
    return HeadMesh(
        raw.positions.astype(np.float32),
        normals,
        raw.colors,
        raw.indices.astype(np.uint32),
        tuple(MorphTarget.from_dense(d) for d in morphs),
    )

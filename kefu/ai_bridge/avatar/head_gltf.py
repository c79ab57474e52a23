"""An operator's own avatar: a binary glTF (GLB) head with ARKit-named morph targets.

:func:`load_glb` reads a GLB as Ready Player Me and most face-capture pipelines export it
(morph target names in ``mesh.extras.targetNames``), keeps the meshes that carry ARKit
targets (head, eyes, teeth) plus the static meshes that sit on them (hair, brows, glasses),
and merges them into one :class:`~.head_mesh.HeadMesh`:

* node transforms are applied (translation, rotation, scale or a matrix, through the node
  tree); a skinned mesh is taken in its bind pose, as authored;
* the head is turned and scaled into kefu's frame from its own landmarks: the centres of the
  eyelids (what eyeBlinkLeft/Right move) and of the jaw (jawOpen) give left, up and forward,
  the distance between the eyes the scale, so any up-axis convention or unit works;
* colours come from each material's ``baseColorFactor`` times ``COLOR_0`` when present.
  **Textures are ignored**: a textured material with a white factor gets a colour guessed
  from its name (skin, teeth, eyes, hair), documented in docs/avatar-mesh.md;
* target names that are not ARKit names are ignored and counted; ARKit shapes the file lacks
  become empty morphs and are reported (:class:`GlbReport`).

Strict limits (file size, vertex count, every accessor inside its buffer, triangles only for
what is kept) and any inconsistency raise :class:`~.head_mesh.AvatarAssetError`;
:func:`load_head` turns that into the default head plus the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, INDEX
from kefu.ai_bridge.avatar.glb_read import (
    Reader,
    fail,
    get,
    material_color,
    mesh_instances,
    read_glb,
)
from kefu.ai_bridge.avatar.head_mesh import (
    AvatarAssetError,
    HeadMesh,
    MorphTarget,
    default_head,
    vertex_normals,
)

__all__ = [
    "MAX_BYTES",
    "MAX_VERTICES",
    "MIN_SHAPES",
    "REQUIRED",
    "GlbReport",
    "load_glb",
    "load_glb_report",
    "load_head",
]

log = structlog.get_logger(__name__)

MAX_BYTES = 32 * 1024 * 1024
MAX_VERTICES = 200_000
REQUIRED = ("jawOpen", "eyeBlinkLeft", "eyeBlinkRight")
"""Shapes an avatar must have: the face must at least talk and blink."""
MIN_SHAPES = 5
"""Fewest distinct ARKit shapes an avatar must have (the required ones included)."""

# Where the default head's landmarks are (displacement-weighted centres of what the shapes
# move; tests/ai_bridge/avatar/test_head_gltf.py checks them against default_head()).
EYE_LEFT = np.array([0.1609, 0.3626, 0.3491])
EYE_RIGHT = np.array([-0.1592, 0.3632, 0.3499])
JAW = np.array([0.0011, -0.1034, 0.3683])

F64 = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class GlbReport:
    """What :func:`load_glb_report` took from a file and what it could not use."""

    meshes: tuple[str, ...]
    """Names of the meshes merged (with morphs first)."""
    vertices: int
    triangles: int
    missing: tuple[str, ...]
    """ARKit shapes the file lacks (empty morphs)."""
    unknown: tuple[str, ...]
    """Target names that are not ARKit shapes (ignored)."""
    skipped: tuple[str, ...] = field(default=())
    """Why a mesh or primitive was left out (no triangles, far from the head)."""
    textured: bool = False
    """A material had a texture (ignored; a factor or a guessed colour was used)."""


@dataclass
class _Parts:
    positions: list[F64] = field(default_factory=list)
    normals: list[F64] = field(default_factory=list)
    colors: list[F64] = field(default_factory=list)
    indices: list[NDArray[np.int64]] = field(default_factory=list)
    deltas: dict[int, list[tuple[NDArray[np.int64], F64]]] = field(default_factory=dict)
    count: int = 0
    names: list[str] = field(default_factory=list)


def _add_primitive(
    parts: _Parts, reader: Reader, prim: Any, world: F64, names: list[str], color: F64
) -> int:
    attrs = prim.attributes
    pos_index = get(attrs, "POSITION")
    if pos_index is None:
        raise fail("a primitive has no POSITION")
    pos = reader.accessor(pos_index, width=3)
    n = len(pos)
    linear = world[:3, :3]
    normal_m = np.linalg.inv(linear).T if abs(np.linalg.det(linear)) > 1e-12 else linear
    if prim.indices is not None:
        idx = reader.accessor(prim.indices, width=1)[:, 0].astype(np.int64)
    else:
        idx = np.arange(n, dtype=np.int64)
    if len(idx) % 3 or (idx.size and (idx.min() < 0 or idx.max() >= n)):
        raise fail("a primitive's indices are not whole triangles of its vertices")
    tri = idx.reshape(-1, 3)
    normal_index = get(attrs, "NORMAL")
    if normal_index is not None:
        nrm = reader.accessor(normal_index, width=3) @ normal_m.T
    else:
        nrm = vertex_normals(pos, tri).astype(np.float64) @ normal_m.T
    nrm /= np.maximum(np.linalg.norm(nrm, axis=1), 1e-12)[:, None]
    rgb = np.broadcast_to(color, (n, 3)).copy()
    color_index = get(attrs, "COLOR_0")
    if color_index is not None:
        vc = reader.accessor(color_index)
        if vc.shape[1] in (3, 4):
            rgb = rgb * np.clip(vc[:, :3], 0, 1)
    targets = prim.targets or []
    if targets and len(names) != len(targets):
        raise fail(f"{len(targets)} morph targets but {len(names)} target names")
    for name, target in zip(names, targets, strict=False):
        k = INDEX.get(name)
        delta_index = get(target, "POSITION")
        if k is None or delta_index is None:
            continue
        d = reader.accessor(delta_index, width=3)
        if len(d) != n:
            raise fail(f"target {name} has {len(d)} offsets for {n} vertices")
        moved = np.flatnonzero(np.abs(d).max(axis=1) > 0)
        parts.deltas.setdefault(k, []).append((moved + parts.count, d[moved] @ linear.T))
    parts.positions.append(pos @ linear.T + world[:3, 3])
    parts.normals.append(nrm)
    parts.colors.append(rgb)
    parts.indices.append(tri + parts.count)
    parts.count += n
    return n


def _landmark(positions: F64, chunks: list[tuple[NDArray[np.int64], F64]]) -> F64:
    idx = np.concatenate([i for i, _ in chunks])
    w = np.linalg.norm(np.concatenate([d for _, d in chunks]), axis=1)
    if w.sum() <= 0:
        raise fail("a required shape moves nothing")
    out: F64 = (positions[idx] * w[:, None]).sum(axis=0) / w.sum()
    return out


def _frame(positions: F64, deltas: dict[int, list[tuple[NDArray[np.int64], F64]]]) -> F64:
    """The 4x4 that turns and scales the file's head onto the default head's landmarks."""
    left = _landmark(positions, deltas[INDEX["eyeBlinkLeft"]])
    right = _landmark(positions, deltas[INDEX["eyeBlinkRight"]])
    jaw = _landmark(positions, deltas[INDEX["jawOpen"]])
    mid = 0.5 * (left + right)
    x = left - right
    if np.linalg.norm(x) < 1e-9:
        raise fail("the two eyes are in the same place")
    x /= np.linalg.norm(x)
    up = mid - jaw
    y = up - x * (up @ x)
    if np.linalg.norm(y) < 1e-9:
        raise fail("the jaw is level with the eyes: cannot tell up from down")
    y /= np.linalg.norm(y)
    z = np.cross(x, y)
    rot = np.stack([x, y, z])  # rows: file axes → kefu axes
    scale = np.linalg.norm(EYE_LEFT - EYE_RIGHT) / np.linalg.norm(left - right)
    target_mid = 0.5 * (EYE_LEFT + EYE_RIGHT)
    m = np.identity(4)
    m[:3, :3] = scale * rot
    m[:3, 3] = target_mid - scale * rot @ mid
    return m


def load_glb_report(
    path: str, *, max_bytes: int = MAX_BYTES, max_vertices: int = MAX_VERTICES
) -> tuple[HeadMesh, GlbReport]:
    """Load an avatar GLB (see the module doc) and say what was used."""
    gltf, blob = read_glb(path, max_bytes)
    reader = Reader(gltf, blob)
    meshes = gltf.meshes or []
    instances = mesh_instances(gltf)
    unknown: set[str] = set()
    with_shapes: list[tuple[Any, F64, list[str]]] = []
    static: list[tuple[Any, F64, list[str]]] = []
    for mesh_index, world in instances:
        if not 0 <= mesh_index < len(meshes):
            raise fail(f"a node shows mesh {mesh_index}, which does not exist")
        mesh = meshes[mesh_index]
        names = list((mesh.extras or {}).get("targetNames") or [])
        if not names and mesh.primitives:
            names = list((mesh.primitives[0].extras or {}).get("targetNames") or [])
        if not all(isinstance(n, str) for n in names):
            raise fail(f"mesh {mesh.name!r}: target names are not strings")
        unknown.update(n for n in names if n not in INDEX)
        (with_shapes if any(n in INDEX for n in names) else static).append((mesh, world, names))
    if not with_shapes:
        raise fail(f"{path}: no mesh has ARKit-named morph targets (mesh.extras.targetNames)")
    total = 0
    accessors = gltf.accessors or []
    for mesh, _, _ in with_shapes + static:
        for prim in mesh.primitives:
            index = get(prim.attributes, "POSITION")
            if isinstance(index, int) and 0 <= index < len(accessors):
                total += int(accessors[index].count or 0)
    if total > max_vertices:
        raise fail(f"{path} has {total} vertices, more than the {max_vertices} allowed")
    parts = _Parts()
    skipped: list[str] = []
    textured = False
    for mesh, world, names in with_shapes:
        for prim in mesh.primitives:
            if prim.mode not in (None, 4):
                skipped.append(f"{mesh.name}: primitive mode {prim.mode} is not triangles")
                continue
            color, tex = material_color(gltf, prim.material, mesh.name or "")
            textured |= tex
            _add_primitive(parts, reader, prim, world, names, color)
        parts.names.append(mesh.name or "?")
    present = {BLENDSHAPES[k] for k in parts.deltas}
    absent = [n for n in REQUIRED if n not in present]
    if absent:
        raise fail(f"{path} lacks the required shapes {', '.join(absent)}")
    if len(present) < MIN_SHAPES:
        raise fail(f"{path} has {len(present)} ARKit shapes, fewer than {MIN_SHAPES}")
    head_positions = np.concatenate(parts.positions)
    lo, hi = head_positions.min(axis=0), head_positions.max(axis=0)
    margin = 0.3 * (hi - lo)
    for mesh, world, _names in static:
        for prim in mesh.primitives:
            pos_index = get(prim.attributes, "POSITION")
            if prim.mode not in (None, 4) or pos_index is None:
                continue
            pos = reader.accessor(pos_index, width=3) @ world[:3, :3].T + world[:3, 3]
            inside = np.all((pos >= lo - margin) & (pos <= hi + margin), axis=1).mean()
            if inside < 0.8:
                skipped.append(f"{mesh.name}: away from the head ({inside:.0%} inside)")
                continue
            color, tex = material_color(gltf, prim.material, mesh.name or "")
            textured |= tex
            _add_primitive(parts, reader, prim, world, [], color)
            parts.names.append(mesh.name or "?")
    positions = np.concatenate(parts.positions)
    frame = _frame(positions, parts.deltas)
    linear = frame[:3, :3]
    positions = positions @ linear.T + frame[:3, 3]
    normals = np.concatenate(parts.normals) @ (linear / np.linalg.norm(linear[0])).T
    morphs = []
    for k in range(len(BLENDSHAPES)):
        chunks = parts.deltas.get(k)
        if not chunks:
            morphs.append(MorphTarget.empty())
            continue
        idx = np.concatenate([i for i, _ in chunks])
        d = np.concatenate([d for _, d in chunks]) @ linear.T
        morphs.append(MorphTarget(idx.astype(np.uint32), d.astype(np.float32)))
    colors = np.concatenate(parts.colors)
    rgba = np.concatenate([np.clip(np.round(colors), 0, 255), np.full((len(colors), 1), 255)], 1)
    head = HeadMesh(
        positions.astype(np.float32),
        normals.astype(np.float32),
        rgba.astype(np.uint8),
        np.concatenate(parts.indices).astype(np.uint32),
        tuple(morphs),
    )
    lids = np.concatenate([i for i, _ in parts.deltas[INDEX["eyeBlinkLeft"]]])
    if float(head.normals[lids, 2].mean()) < 0.0:
        raise fail(f"{path}: the face looks away from +Z after alignment (mirrored model?)")
    report = GlbReport(
        meshes=tuple(parts.names),
        vertices=head.vertex_count,
        triangles=head.triangle_count,
        missing=tuple(n for n in BLENDSHAPES if n not in present),
        unknown=tuple(sorted(unknown)),
        skipped=tuple(skipped),
        textured=textured,
    )
    return head, report


def load_glb(
    path: str, *, max_bytes: int = MAX_BYTES, max_vertices: int = MAX_VERTICES
) -> HeadMesh:
    """Load an avatar GLB; what it lacks or ignores is logged (``avatar_glb_loaded``)."""
    head, report = load_glb_report(path, max_bytes=max_bytes, max_vertices=max_vertices)
    log.info(
        "avatar_glb_loaded",
        path=path,
        meshes=list(report.meshes),
        vertices=report.vertices,
        triangles=report.triangles,
        missing=len(report.missing),
        missing_names=list(report.missing),
        unknown=len(report.unknown),
        skipped=list(report.skipped),
        textures_ignored=report.textured,
    )
    return head


def load_head(path: str | None) -> tuple[HeadMesh, str | None]:
    """The operator's avatar at ``path``, or the default head and why the file was not used
    (``None`` when no file was given or it loaded)."""
    if not path:
        return default_head(), None
    try:
        return load_glb(path), None
    except AvatarAssetError as exc:
        return default_head(), str(exc)

"""Reading a binary glTF (GLB) safely: bounds-checked accessors, node transforms, colours.

The parts of :mod:`.head_gltf` that only read the file: every accessor and bufferView is
checked against its buffer before a byte is used, sparse accessors and normalized integers
are decoded, and anything inconsistent raises :class:`~.head_mesh.AvatarAssetError`.
"""

from __future__ import annotations

import os
import struct
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.head_mesh import AvatarAssetError

__all__ = [
    "Reader",
    "fail",
    "get",
    "material_color",
    "mesh_instances",
    "node_matrix",
    "read_glb",
    "srgb",
]

F64 = NDArray[np.float64]

_COMPONENTS = {
    5120: np.int8,
    5121: np.uint8,
    5122: np.int16,
    5123: np.uint16,
    5125: np.uint32,
    5126: np.float32,
}
_WIDTHS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
_NAMED_COLORS = (  # (name fragment, sRGB) for textured materials with a white factor
    (("teeth", "tooth"), (232, 226, 214)),
    (("eye",), (236, 232, 226)),
    (("hair", "brow", "lash", "beard"), (62, 43, 33)),
    (("skin", "head", "body", "face"), (224, 170, 140)),
)


def fail(message: str) -> AvatarAssetError:
    return AvatarAssetError(message)


def get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


class Reader:
    """Typed, bounds-checked views of a GLB's accessors."""

    def __init__(self, gltf: Any, blob: bytes) -> None:
        self.gltf = gltf
        self.blob = blob

    def view(self, index: int) -> tuple[int, int, int | None]:
        views = self.gltf.bufferViews or []
        if not 0 <= index < len(views):
            raise fail(f"bufferView {index} does not exist")
        view = views[index]
        buffers = self.gltf.buffers or []
        if view.buffer != 0 or not buffers or buffers[0].uri:
            raise fail("only the GLB's own binary chunk is supported (no external buffers)")
        start, length = view.byteOffset or 0, view.byteLength or 0
        if start < 0 or length < 0 or start + length > len(self.blob):
            raise fail(f"bufferView {index} runs past the binary chunk")
        return start, length, view.byteStride

    def _array(
        self, view: int, offset: int, ctype: int, width: int, count: int
    ) -> NDArray[np.generic]:
        if ctype not in _COMPONENTS:
            raise fail(f"unknown component type {ctype}")
        dtype = np.dtype(_COMPONENTS[ctype]).newbyteorder("<")
        start, length, stride = self.view(view)
        item = dtype.itemsize * width
        stride = stride or item
        if count < 0 or offset < 0 or stride < item:
            raise fail("an accessor has a negative count or offset, or a short stride")
        if count and offset + stride * (count - 1) + item > length:
            raise fail("an accessor runs past its bufferView")
        if count == 0:
            return np.zeros((0, width), dtype)
        return np.ndarray(
            (count, width), dtype, self.blob, start + offset, (stride, dtype.itemsize)
        ).copy()

    def accessor(self, index: int, *, width: int | None = None) -> F64:
        accessors = self.gltf.accessors or []
        if not isinstance(index, int) or not 0 <= index < len(accessors):
            raise fail(f"accessor {index} does not exist")
        acc = accessors[index]
        if acc.type not in _WIDTHS or acc.count is None:
            raise fail(f"accessor {index} has no type or count")
        n = _WIDTHS[acc.type]
        if width is not None and n != width:
            raise fail(f"accessor {index} is {acc.type}, expected {width} components")
        if acc.bufferView is None:
            data: NDArray[np.generic] = np.zeros((acc.count, n), np.float32)
        else:
            data = self._array(acc.bufferView, acc.byteOffset or 0, acc.componentType, n, acc.count)
        out = data.astype(np.float64)
        if acc.normalized and data.dtype.kind in "iu":
            out = out / float(np.iinfo(data.dtype.type).max)  # type: ignore[type-var]
            out = np.maximum(out, -1.0)
        sparse = acc.sparse
        if sparse is not None and sparse.count:
            where = self._array(
                sparse.indices.bufferView,
                sparse.indices.byteOffset or 0,
                sparse.indices.componentType,
                1,
                sparse.count,
            )[:, 0]
            values = self._array(
                sparse.values.bufferView,
                sparse.values.byteOffset or 0,
                acc.componentType,
                n,
                sparse.count,
            ).astype(np.float64)
            if where.size and int(where.max()) >= acc.count:
                raise fail(f"accessor {index}: a sparse index is out of range")
            out[where.astype(np.int64)] = values
        if not np.isfinite(out).all():
            raise fail(f"accessor {index} holds NaN or infinity")
        return out


def node_matrix(node: Any) -> F64:
    if node.matrix:
        if len(node.matrix) != 16:
            raise fail("a node matrix does not have 16 numbers")
        return np.array(node.matrix, np.float64).reshape(4, 4).T
    m = np.identity(4)
    if node.scale:
        m = np.diag([*node.scale, 1.0]) @ m
    if node.rotation:
        x, y, z, w = node.rotation
        rot = np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
            ]
        )
        r4 = np.identity(4)
        r4[:3, :3] = rot
        m = r4 @ m
    if node.translation:
        t4 = np.identity(4)
        t4[:3, 3] = node.translation
        m = t4 @ m
    return m


def mesh_instances(gltf: Any) -> list[tuple[int, F64]]:
    """(mesh index, world matrix) for every node that shows a mesh, walking the scene."""
    nodes = gltf.nodes or []
    scenes = gltf.scenes or []
    scene = scenes[gltf.scene or 0] if scenes else None
    roots = list(scene.nodes) if scene is not None and scene.nodes else []
    if not roots:
        children = {c for n in nodes for c in (n.children or [])}
        roots = [i for i in range(len(nodes)) if i not in children]
    out: list[tuple[int, F64]] = []
    stack = [(i, np.identity(4), 0) for i in roots]
    seen = 0
    while stack:
        index, parent, depth = stack.pop()
        seen += 1
        if not 0 <= index < len(nodes) or depth > 64 or seen > 10_000:
            raise fail("the node tree is broken (a bad index, a cycle or too deep)")
        node = nodes[index]
        world = parent @ node_matrix(node)
        if node.mesh is not None:
            out.append((node.mesh, np.identity(4) if node.skin is not None else world))
        stack.extend((c, world, depth + 1) for c in (node.children or []))
    return out


def srgb(linear: F64) -> F64:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)


def material_color(gltf: Any, index: int | None, mesh_name: str) -> tuple[F64, bool]:
    """sRGB 0..255 colour of a material, and whether it had a texture."""
    materials = gltf.materials or []
    if index is None or not 0 <= index < len(materials):
        return np.array([200.0, 200.0, 200.0]), False
    mat = materials[index]
    pbr = mat.pbrMetallicRoughness
    factor = np.array((pbr.baseColorFactor if pbr and pbr.baseColorFactor else [1, 1, 1, 1])[:3])
    textured = bool(pbr and pbr.baseColorTexture is not None)
    color = srgb(factor) * 255.0
    if textured and factor.min() > 0.95:
        name = f"{mat.name or ''} {mesh_name}".lower()
        for fragments, guess in _NAMED_COLORS:
            if any(f in name for f in fragments):
                return np.array(guess, np.float64), True
    return color, textured


def read_glb(path: str, max_bytes: int) -> tuple[Any, bytes]:
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise fail(f"cannot read {path}: {exc.strerror or exc}") from exc
    if size > max_bytes:
        raise fail(f"{path} is {size} bytes, more than the {max_bytes} allowed")
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) < 20 or data[:4] != b"glTF":
        raise fail(f"{path} is not a binary glTF (GLB) file")
    version, length = struct.unpack_from("<II", data, 4)
    if version != 2 or length != len(data):
        raise fail(f"{path}: GLB version {version}, length {length} of {len(data)} bytes")
    from pygltflib import GLTF2

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gltf = GLTF2.load_from_bytes(data)
        blob = gltf.binary_blob() or b""
    except Exception as exc:  # noqa: BLE001 - pygltflib raises anything on garbage
        raise fail(f"{path}: not a readable glTF: {exc}") from exc
    if gltf is None:
        raise fail(f"{path}: no JSON chunk")
    return gltf, bytes(blob)

"""Operators' own avatars: GLB files with ARKit-named morph targets, built here with
pygltflib, loaded, aligned, refused when they are unusable."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pygltflib as g
import pytest

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, INDEX
from kefu.ai_bridge.avatar.head_gltf import (
    EYE_LEFT,
    EYE_RIGHT,
    JAW,
    load_glb,
    load_glb_report,
    load_head,
)
from kefu.ai_bridge.avatar.head_mesh import AvatarAssetError, HeadMesh, default_head

SHAPES = (
    "jawOpen",
    "eyeBlinkLeft",
    "eyeBlinkRight",
    "mouthFunnel",
    "mouthSmileLeft",
    "customBrowRaise",
)


def sphere(n_lat: int = 24, n_lon: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """A unit UV sphere looking along +Z (its poles on ±Y), counter-clockwise outside."""
    lat = np.linspace(-np.pi / 2, np.pi / 2, n_lat)
    lon = np.linspace(-np.pi, np.pi, n_lon, endpoint=False)
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    pos = np.stack([np.cos(la) * np.sin(lo), np.sin(la), np.cos(la) * np.cos(lo)], -1)
    idx = np.arange(n_lat * n_lon).reshape(n_lat, n_lon)
    a, b = idx[:-1], np.roll(idx[:-1], -1, axis=1)
    c, d = np.roll(idx[1:], -1, axis=1), idx[1:]
    tri = np.concatenate([np.stack([a, b, c], -1), np.stack([a, c, d], -1)]).reshape(-1, 3)
    return pos.reshape(-1, 3), tri


def target(pos: np.ndarray, name: str) -> np.ndarray:
    """Offsets of a few ARKit-ish shapes on the sphere face (and one unknown name)."""

    def near(c: tuple[float, float, float], r: float) -> np.ndarray:
        return np.exp(-np.sum((pos - np.array(c)) ** 2, axis=1) / r**2)[:, None]

    if name == "jawOpen":
        return near((0, -0.55, 0.8), 0.35) * [0.0, -0.15, 0.0]
    if name == "eyeBlinkLeft":
        return near((0.35, 0.3, 0.88), 0.15) * [0.0, -0.05, 0.0]
    if name == "eyeBlinkRight":
        return near((-0.35, 0.3, 0.88), 0.15) * [0.0, -0.05, 0.0]
    if name == "mouthFunnel":
        return near((0, -0.4, 0.9), 0.15) * [0.0, 0.0, 0.05]
    if name == "mouthSmileLeft":
        return near((0.3, -0.4, 0.85), 0.12) * [0.02, 0.03, 0.0]
    return near((0, 0.6, 0.8), 0.2) * [0.0, 0.04, 0.0]


def make_glb(
    path: Path,
    *,
    names: tuple[str, ...] = SHAPES,
    rotate: np.ndarray | None = None,
    scale: float = 1.0,
    node: dict | None = None,
    color: tuple[float, float, float, float] = (0.6, 0.3, 0.2, 1.0),
    n_lat: int = 24,
    extra_static: bool = False,
) -> Path:
    pos, tri = sphere(n_lat)
    normals = pos.copy()
    deltas = [target(pos, n) for n in names]
    if rotate is not None:
        pos, normals = pos @ rotate.T, normals @ rotate.T
        deltas = [d @ rotate.T for d in deltas]
    pos, deltas = pos * scale, [d * scale for d in deltas]
    arrays = [pos.astype("<f4"), normals.astype("<f4"), tri.astype("<u4").reshape(-1)]
    arrays += [d.astype("<f4") for d in deltas]
    kinds = ["VEC3", "VEC3", "SCALAR"] + ["VEC3"] * len(deltas)
    blob, views, accessors = b"", [], []
    for i, (arr, kind) in enumerate(zip(arrays, kinds, strict=True)):
        data = arr.tobytes()
        views.append(g.BufferView(buffer=0, byteOffset=len(blob), byteLength=len(data)))
        ctype = g.UNSIGNED_INT if kind == "SCALAR" else g.FLOAT
        count = len(arr)
        acc = g.Accessor(bufferView=i, componentType=ctype, count=count, type=kind)
        if i == 0:
            acc.min, acc.max = arr.min(0).tolist(), arr.max(0).tolist()
        accessors.append(acc)
        blob += data + b"\0" * (-len(data) % 4)
    prim = g.Primitive(
        attributes=g.Attributes(POSITION=0, NORMAL=1),
        indices=2,
        material=0,
        targets=[g.Attributes(POSITION=3 + i) for i in range(len(deltas))],
    )
    meshes = [g.Mesh(name="Head", primitives=[prim], extras={"targetNames": list(names)})]
    nodes = [g.Node(mesh=0, name="head", **(node or {}))]
    if extra_static:
        # A static "hair" cap over the head (no morphs) and a far-away "floor" (left out).
        meshes.append(
            g.Mesh(
                name="Hair",
                primitives=[
                    g.Primitive(attributes=g.Attributes(POSITION=0), indices=2, material=1)
                ],
            )
        )
        meshes.append(
            g.Mesh(
                name="Floor",
                primitives=[g.Primitive(attributes=g.Attributes(POSITION=0), indices=2)],
            )
        )
        nodes.append(g.Node(mesh=1, name="hair", scale=[1.05, 1.05, 1.05]))
        nodes.append(g.Node(mesh=2, name="floor", translation=[0.0, -40.0, 0.0]))
    gltf = g.GLTF2(
        scene=0,
        scenes=[g.Scene(nodes=list(range(len(nodes))))],
        nodes=nodes,
        meshes=meshes,
        accessors=accessors,
        bufferViews=views,
        buffers=[g.Buffer(byteLength=len(blob))],
        materials=[
            g.Material(pbrMetallicRoughness=g.PbrMetallicRoughness(baseColorFactor=list(color))),
            g.Material(
                name="Hair",
                pbrMetallicRoughness=g.PbrMetallicRoughness(
                    baseColorFactor=[1, 1, 1, 1], baseColorTexture=g.TextureInfo(index=0)
                ),
            ),
        ],
    )
    gltf.set_binary_blob(blob)
    path.write_bytes(b"".join(gltf.save_to_bytes()))
    return path


def landmark(head: HeadMesh, name: str) -> np.ndarray:
    m = head.morphs[INDEX[name]]
    w = np.linalg.norm(m.deltas, axis=1)
    return (head.positions[m.indices] * w[:, None]).sum(0) / w.sum()


def test_the_landmarks_are_the_default_heads() -> None:
    head = default_head()
    for name, where in (("eyeBlinkLeft", EYE_LEFT), ("eyeBlinkRight", EYE_RIGHT), ("jawOpen", JAW)):
        assert np.allclose(landmark(head, name), where, atol=2e-3), name


def test_a_glb_with_a_few_arkit_targets_loads(tmp_path: Path) -> None:
    head, report = load_glb_report(str(make_glb(tmp_path / "head.glb")))
    assert head.vertex_count == 24 * 32 and len(head.morphs) == 52
    present = {"jawOpen", "eyeBlinkLeft", "eyeBlinkRight", "mouthFunnel", "mouthSmileLeft"}
    for name, morph in zip(BLENDSHAPES, head.morphs, strict=True):
        assert (len(morph) > 0) == (name in present), name
    assert set(report.missing) == set(BLENDSHAPES) - present
    assert report.unknown == ("customBrowRaise",)
    assert report.meshes == ("Head",) and not report.textured
    # Aligned onto the default head: its eyes where the default head's are.
    assert np.allclose(landmark(head, "eyeBlinkLeft"), EYE_LEFT, atol=1e-3)
    assert np.allclose(landmark(head, "eyeBlinkRight"), EYE_RIGHT, atol=1e-3)
    assert landmark(head, "jawOpen")[1] < EYE_LEFT[1] - 0.3
    # The jaw still opens downward, the funnel still pushes out (+Z, toward the camera).
    assert head.morphs[INDEX["jawOpen"]].deltas[:, 1].sum() < 0
    assert head.morphs[INDEX["mouthFunnel"]].deltas[:, 2].sum() > 0
    # Colour: the linear baseColorFactor as sRGB.
    assert tuple(head.colors[0]) == (203, 149, 124, 255)
    assert np.allclose(np.linalg.norm(head.normals, axis=1), 1.0, atol=1e-5)
    assert HeadMesh.from_wire(head.to_wire()).vertex_count == head.vertex_count


def test_any_up_axis_unit_and_node_transform_lands_in_the_same_place(tmp_path: Path) -> None:
    plain = load_glb(str(make_glb(tmp_path / "plain.glb")))
    z_up = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # +Y → +Z, +Z → -Y
    variants = [
        make_glb(tmp_path / "zup_cm.glb", rotate=z_up, scale=12.0),
        make_glb(
            tmp_path / "node.glb",
            node={
                "translation": [5.0, 160.0, -3.0],
                "scale": [20.0, 20.0, 20.0],
                "rotation": [0.0, 0.3826834, 0.0, 0.9238795],
            },
        ),
        make_glb(
            tmp_path / "matrix.glb",
            node={"matrix": [2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 1, 2, 3, 1]},
        ),
    ]
    for path in variants:
        head = load_glb(str(path))
        assert np.allclose(head.positions, plain.positions, atol=1e-4), path.name
        assert np.allclose(head.normals, plain.normals, atol=1e-4), path.name
        jaw = head.morphs[INDEX["jawOpen"]]
        assert np.allclose(jaw.deltas, plain.morphs[INDEX["jawOpen"]].deltas, atol=1e-5)


def test_static_meshes_on_the_head_come_along_others_do_not(tmp_path: Path) -> None:
    head, report = load_glb_report(str(make_glb(tmp_path / "hair.glb", extra_static=True)))
    assert report.meshes == ("Head", "Hair")
    assert any("Floor" in s for s in report.skipped)
    assert head.vertex_count == 2 * 24 * 32
    assert report.textured
    hair = head.colors[24 * 32 :, :3].astype(int)
    assert hair.max() < 90  # a textured white "Hair" material: the guessed hair colour


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"names": ("browUp", "smile", "blinkL", "blinkR", "open", "other")}, "no mesh has"),
        (
            {
                "names": (
                    "jawOpen",
                    "eyeBlinkLeft",
                    "mouthFunnel",
                    "mouthSmileLeft",
                    "mouthPucker",
                    "cheekPuff",
                )
            },
            "eyeBlinkRight",
        ),
        ({"names": ("jawOpen", "eyeBlinkLeft", "eyeBlinkRight", "x1", "x2", "x3")}, "fewer than"),
    ],
)
def test_unusable_targets_are_refused(tmp_path: Path, kwargs: dict, message: str) -> None:
    path = make_glb(tmp_path / "bad.glb", **kwargs)
    with pytest.raises(AvatarAssetError, match=message):
        load_glb(str(path))


def test_limits_are_enforced(tmp_path: Path) -> None:
    path = str(make_glb(tmp_path / "big.glb", n_lat=40))
    with pytest.raises(AvatarAssetError, match="vertices, more than"):
        load_glb(path, max_vertices=1000)
    with pytest.raises(AvatarAssetError, match="bytes, more than"):
        load_glb(path, max_bytes=10_000)
    assert load_glb(path).vertex_count == 40 * 32


def test_garbage_and_broken_files_are_refused(tmp_path: Path) -> None:
    good = make_glb(tmp_path / "good.glb").read_bytes()
    cases = {
        "missing.glb": None,
        "empty.glb": b"",
        "garbage.glb": bytes(range(256)) * 40,
        "json.gltf": b'{"asset": {"version": "2.0"}}',
        "truncated.glb": good[: len(good) // 2],
        "length.glb": good[:8] + struct.pack("<I", len(good) + 4) + good[12:],
        "version.glb": good[:4] + struct.pack("<I", 1) + good[8:],
        "badjson.glb": good[:20] + b"{" * 10 + good[30:],
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(AvatarAssetError):
            load_glb(str(path))
        mesh, reason = load_head(str(path))
        assert mesh is default_head() and reason, name


def test_an_accessor_past_its_buffer_is_refused(tmp_path: Path) -> None:
    path = make_glb(tmp_path / "acc.glb")
    gltf = g.GLTF2().load_binary(str(path))
    gltf.accessors[0].count += 10_000
    blob = gltf.binary_blob()
    gltf.set_binary_blob(blob)
    path.write_bytes(b"".join(gltf.save_to_bytes()))
    with pytest.raises(AvatarAssetError, match="past"):
        load_glb(str(path))


def test_a_mirrored_model_is_refused(tmp_path: Path) -> None:
    mirror = np.diag([-1.0, 1.0, 1.0])  # the face's left eye on the wrong side
    path = make_glb(tmp_path / "mirror.glb", rotate=mirror)
    with pytest.raises(AvatarAssetError, match="mirrored"):
        load_glb(str(path))


def test_load_head_falls_back_to_the_default(tmp_path: Path) -> None:
    assert load_head(None) == (default_head(), None)
    assert load_head("") == (default_head(), None)
    mesh, reason = load_head(str(tmp_path / "nope.glb"))
    assert mesh is default_head() and reason is not None and "cannot read" in reason
    good = str(make_glb(tmp_path / "ok.glb"))
    mesh, reason = load_head(good)
    assert reason is None and mesh.vertex_count == 24 * 32

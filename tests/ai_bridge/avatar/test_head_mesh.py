"""The default parametric head: its shape, its 52 morph targets and its wire format."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, COUNT, INDEX
from kefu.ai_bridge.avatar.head_build import Part, RawHead, build_head
from kefu.ai_bridge.avatar.head_mesh import (
    AvatarAssetError,
    HeadMesh,
    MorphTarget,
    default_head,
)
from kefu.ai_bridge.avatar.head_shape import LANDMARKS
from kefu.errors import LocalError


@pytest.fixture(scope="module")
def head() -> HeadMesh:
    return default_head()


@pytest.fixture(scope="module")
def raw() -> RawHead:
    return build_head()


def pose(**weights: float) -> np.ndarray:
    w = np.zeros(COUNT, np.float32)
    for name, value in weights.items():
        w[INDEX[name]] = value
    return w


def moved(head: HeadMesh, name: str) -> np.ndarray:
    """Neutral positions of the vertices shape ``name`` moves by more than 0.5 mm-ish."""
    morph = head.morphs[INDEX[name]]
    big = np.linalg.norm(morph.deltas, axis=1) > 1e-3
    return head.positions[morph.indices[big]]


# -- shape --------------------------------------------------------------------------------


def test_the_default_head_is_cached_fast_and_deterministic(raw: RawHead) -> None:
    started = time.perf_counter()
    again = build_head()
    assert time.perf_counter() - started < 1.0  # ~0.1 s on a laptop core
    assert np.array_equal(again.positions, raw.positions)
    assert np.array_equal(again.indices, raw.indices)
    assert default_head() is default_head()


def test_the_mesh_is_sized_and_framed_as_documented(head: HeadMesh) -> None:
    assert 5_000 <= head.vertex_count <= 12_000
    assert 8_000 <= head.triangle_count <= 16_000
    lo, hi = head.positions.min(axis=0), head.positions.max(axis=0)
    assert np.all(lo >= -1.0) and np.all(hi <= 1.0)
    face = head.positions[head.positions[:, 2] > 0.3]
    # The face looks along +Z: the nose tip is the frontmost point, in the middle.
    tip = head.positions[np.argmax(head.positions[:, 2])]
    assert abs(tip[0]) < 0.01 and 0.1 < tip[1] < 0.25
    assert face[:, 1].max() > LANDMARKS.eye_y > LANDMARKS.mouth_y > face[:, 1].min()


def test_normals_are_unit_and_point_out_of_the_skin(head: HeadMesh, raw: RawHead) -> None:
    assert np.allclose(np.linalg.norm(head.normals, axis=1), 1.0, atol=1e-4)
    skin = raw.part == Part.SKIN
    out = head.positions[skin] - np.array([0.0, 0.3, -0.03])
    assert np.mean(np.sum(head.normals[skin] * out, axis=1) > 0) > 0.99


def test_the_skin_is_watertight_apart_from_the_neck_and_the_eyelid_tucks(raw: RawHead) -> None:
    tri = raw.indices
    kept = np.isin(raw.part[tri], [Part.SKIN, Part.LIDS, Part.LIPS, Part.MOUTH]).all(axis=1)
    edges = np.sort(
        np.concatenate([tri[kept][:, [0, 1]], tri[kept][:, [1, 2]], tri[kept][:, [2, 0]]]), axis=1
    )
    unique, count = np.unique(edges, axis=0, return_counts=True)
    assert count.max() == 2
    open_edges = raw.positions[unique[count == 1]].mean(axis=1)
    at_neck = open_edges[:, 1] < -0.7
    at_eyes = np.abs(np.abs(open_edges[:, 0]) - LANDMARKS.eye_x) < 0.1
    assert np.all(at_neck | at_eyes)


def test_colours_tell_the_parts_apart(head: HeadMesh, raw: RawHead) -> None:
    rgb = head.colors[:, :3].astype(float)
    assert np.all(head.colors[:, 3] == 255)

    def mean(part: Part) -> np.ndarray:
        return rgb[raw.part == part].mean(axis=0)

    skin, lips, hair = mean(Part.SKIN), mean(Part.LIPS), mean(Part.HAIR)
    assert skin[0] > skin[1] > skin[2] and skin.mean() > 150
    assert lips[0] - lips[1] > skin[0] - skin[1]  # redder
    assert hair.mean() < 0.5 * skin.mean()
    eyes = rgb[raw.part == Part.EYEBALL]
    assert eyes.max(axis=1).min() < 30  # a pupil
    assert eyes.min(axis=1).max() > 200  # the white of the eye


# -- morph targets ------------------------------------------------------------------------


def test_every_shape_moves_something_plausible(head: HeadMesh) -> None:
    for name, morph in zip(BLENDSHAPES, head.morphs, strict=True):
        assert len(morph) > 0, name
        size = np.linalg.norm(morph.deltas, axis=1).max()
        assert 0.005 < size < 0.25, (name, size)


REGIONS = {  # shape prefix → (centre x, y, radius) in front view; the face's left is +X
    "eye": ((LANDMARKS.eye_x, LANDMARKS.eye_y), 0.13),
    "brow": ((0.12, 0.45), 0.22),
    "cheek": ((0.2, 0.1), 0.25),
    "nose": ((0.05, 0.3), 0.2),
}


@pytest.mark.parametrize("name", BLENDSHAPES)
def test_every_shape_stays_in_its_region_and_on_its_side(head: HeadMesh, name: str) -> None:
    pts = moved(head, name)
    x, y = pts[:, 0], pts[:, 1]
    sign = 1 if name.endswith("Left") else -1 if name.endswith("Right") else 0
    if name.startswith(("eye", "cheekSquint")) and sign:
        # The face's left shapes move only the face's left (+X), and the other way round.
        assert np.all(sign * x > -0.01), name
    elif sign and name.startswith(("brow", "noseSneer")):
        assert np.all(sign * x > -0.06), name  # a little over the middle
    elif sign and not name.startswith(("jaw", "mouthLeft", "mouthRight")):
        assert sign * x.mean() > 0.03, name  # one corner of the mouth
    if name.startswith("eye"):
        (cx, cy), r = REGIONS["eye"]
        assert np.all(np.hypot(np.abs(x) - cx, y - cy) < r), name
    elif name.startswith("brow"):
        assert y.min() > 0.3 and y.max() < 0.62, name
    elif name.startswith(("mouth", "jaw", "tongue")):
        assert y.max() < 0.3 and y.mean() < 0.1 and np.abs(x).max() < 0.4, name
        assert y.min() > -0.55, name
    elif name.startswith("cheek"):
        assert -0.15 < y.mean() < 0.35, name
    elif name.startswith("nose"):
        assert y.min() > 0.05 and np.abs(x).max() < 0.15, name


@pytest.mark.parametrize(
    "stem",
    [
        "eyeBlink",
        "eyeSquint",
        "eyeWide",
        "eyeLookUp",
        "eyeLookDown",
        "mouthSmile",
        "mouthFrown",
        "mouthDimple",
        "mouthStretch",
        "mouthPress",
        "mouthLowerDown",
        "mouthUpperUp",
        "browDown",
        "browOuterUp",
        "cheekSquint",
        "noseSneer",
    ],
)
def test_left_and_right_shapes_mirror_each_other(head: HeadMesh, stem: str) -> None:
    left, right = head.morphs[INDEX[stem + "Left"]], head.morphs[INDEX[stem + "Right"]]
    assert abs(len(left) - len(right)) <= 0.1 * len(left) + 4

    def centroid(m: MorphTarget) -> np.ndarray:
        w = np.linalg.norm(m.deltas, axis=1)
        return (head.positions[m.indices] * w[:, None]).sum(0) / w.sum()

    a, b = centroid(left), centroid(right)
    assert a[0] > 0 > b[0]
    assert np.allclose(a * [-1, 1, 1], b, atol=0.01)
    big_l = np.linalg.norm(left.deltas, axis=1).max()
    big_r = np.linalg.norm(right.deltas, axis=1).max()
    assert big_l == pytest.approx(big_r, rel=0.1)


def lip_gap(head: HeadMesh, raw: RawHead, weights: np.ndarray, at: float = 0.0) -> float:
    """Distance between the inner edges of the lips round x = ``at``."""
    p = head.blend(weights)
    near = np.abs(p[:, 0] - at) < 0.03
    edge = (raw.part == Part.LIPS) & (np.abs(raw.ring + 1.0) < 1e-9) & near
    upper = p[edge & (raw.upper > 0), 1].min()
    lower = p[edge & (raw.upper < 0), 1].max()
    return float(upper - lower)


def test_jaw_open_opens_the_lips_and_mouth_close_shuts_them(head: HeadMesh, raw: RawHead) -> None:
    assert lip_gap(head, raw, pose()) == pytest.approx(0.0, abs=1e-4)
    gaps = [lip_gap(head, raw, pose(jawOpen=w)) for w in (0.25, 0.5, 1.0)]
    assert 0.02 < gaps[0] < gaps[1] < gaps[2] and gaps[2] > 0.1
    assert lip_gap(head, raw, pose(jawOpen=1.0, mouthClose=1.0)) < 0.2 * gaps[2]
    chin = head.positions[:, 1] < -0.2
    drop = (head.blend(pose(jawOpen=1.0)) - head.positions)[chin & (head.positions[:, 2] > 0.3)]
    assert drop[:, 1].mean() < -0.08  # the chin comes down with the jaw


def test_lip_shapes_open_the_lips_where_they_should(head: HeadMesh, raw: RawHead) -> None:
    for name, at in (
        ("mouthLowerDownLeft", 0.05),
        ("mouthUpperUpRight", -0.05),
        ("mouthFunnel", 0.0),
    ):
        assert lip_gap(head, raw, pose(**{name: 1.0}), at) > 0.01, name
    assert lip_gap(head, raw, pose(mouthLowerDownLeft=1.0), -0.06) < 0.004
    for name in ("mouthPucker", "mouthRollLower", "mouthPressLeft", "mouthSmileLeft"):
        assert lip_gap(head, raw, pose(**{name: 1.0})) < 0.005, name


def test_smile_lifts_and_frown_lowers_the_corner(head: HeadMesh, raw: RawHead) -> None:
    corner = (raw.part == Part.LIPS) & (raw.ring == -1.0)
    left = corner & (head.positions[:, 0] > 0.9 * LANDMARKS.mouth_half_width)
    for name, direction in (("mouthSmileLeft", 1), ("mouthFrownLeft", -1)):
        dy = (head.blend(pose(**{name: 1.0})) - head.positions)[left, 1].mean()
        assert direction * dy > 0.015, name
    right = corner & (head.positions[:, 0] < -0.9 * LANDMARKS.mouth_half_width)
    assert abs((head.blend(pose(mouthSmileLeft=1.0)) - head.positions)[right, 1].mean()) < 1e-3


def test_pucker_and_funnel_push_the_lips_out_and_narrow_the_mouth(
    head: HeadMesh, raw: RawHead
) -> None:
    lips = (raw.part == Part.LIPS) & (raw.ring <= 0)
    for name in ("mouthPucker", "mouthFunnel"):
        p = head.blend(pose(**{name: 1.0}))
        assert p[lips, 2].mean() > head.positions[lips, 2].mean() + 0.02, name
        assert np.abs(p[lips, 0]).max() < 0.85 * np.abs(head.positions[lips, 0]).max(), name


def eye_gap(head: HeadMesh, raw: RawHead, weights: np.ndarray, side: int) -> float:
    p = head.blend(weights)
    margin = (raw.part == Part.LIDS) & (raw.ring == 0.0) & (side * p[:, 0] > 0)
    middle = margin & (np.abs(np.abs(p[:, 0]) - LANDMARKS.eye_x) < 0.02)
    return float(p[middle & (raw.upper > 0), 1].mean() - p[middle & (raw.upper < 0), 1].mean())


def test_a_blink_closes_the_eye_and_wide_opens_it(head: HeadMesh, raw: RawHead) -> None:
    open_gap = eye_gap(head, raw, pose(), +1)
    assert open_gap > 0.05
    assert abs(eye_gap(head, raw, pose(eyeBlinkLeft=1.0), +1)) < 0.1 * open_gap
    right_open = eye_gap(head, raw, pose(), -1)
    assert eye_gap(head, raw, pose(eyeBlinkLeft=1.0), -1) == pytest.approx(right_open, abs=1e-6)
    assert eye_gap(head, raw, pose(eyeBlinkRight=0.5), -1) < 0.65 * right_open
    assert eye_gap(head, raw, pose(eyeWideLeft=1.0), +1) > 1.2 * open_gap
    assert eye_gap(head, raw, pose(eyeSquintLeft=1.0), +1) < 0.8 * open_gap


@pytest.mark.parametrize(
    ("name", "axis", "direction"),
    [
        ("eyeLookUpLeft", 1, 1),
        ("eyeLookDownRight", 1, -1),
        ("eyeLookOutLeft", 0, 1),
        ("eyeLookInLeft", 0, -1),
        ("eyeLookOutRight", 0, -1),
        ("eyeLookInRight", 0, 1),
    ],
)
def test_gaze_turns_the_pupil(
    head: HeadMesh, raw: RawHead, name: str, axis: int, direction: int
) -> None:
    side = 1 if name.endswith("Left") else -1
    pupil = (raw.part == Part.EYEBALL) & (raw.ring == 0.0) & (side * raw.xi > 0)
    assert pupil.sum() == 1
    shift = (head.blend(pose(**{name: 1.0})) - head.positions)[pupil][0]
    assert direction * shift[axis] > 0.02, shift
    other = (raw.part == Part.EYEBALL) & (raw.ring == 0.0) & (side * raw.xi < 0)
    assert np.allclose(head.blend(pose(**{name: 1.0}))[other], head.positions[other])


def test_the_tongue_comes_out(head: HeadMesh, raw: RawHead) -> None:
    tongue = raw.part == Part.TONGUE
    lips_front = head.positions[raw.part == Part.LIPS, 2].max()
    out = head.blend(pose(tongueOut=1.0, jawOpen=0.3))
    assert out[tongue, 2].max() > lips_front + 0.03
    assert head.positions[tongue, 2].max() < lips_front - 0.02


def test_the_jaw_carries_the_lower_teeth_but_not_the_upper(head: HeadMesh, raw: RawHead) -> None:
    p = head.blend(pose(jawOpen=1.0, jawLeft=1.0))
    d = p - head.positions
    assert np.all(d[raw.part == Part.TEETH_UPPER] == 0)
    lower = d[raw.part == Part.TEETH_LOWER]
    assert lower[:, 1].mean() < -0.05 and lower[:, 0].mean() > 0.02


def test_blend_is_the_weighted_sum_of_the_targets(head: HeadMesh) -> None:
    w = np.random.default_rng(7).random(COUNT).astype(np.float32)
    dense = head.positions.astype(np.float64).copy()
    for k, morph in enumerate(head.morphs):
        dense[morph.indices] += w[k] * morph.deltas
    assert np.allclose(head.blend(w), dense, atol=1e-5)
    with pytest.raises(ValueError):
        head.blend(np.zeros(51, np.float32))


def test_arrays_are_read_only(head: HeadMesh) -> None:
    with pytest.raises(ValueError):
        head.positions[0, 0] = 1.0
    with pytest.raises(ValueError):
        head.morphs[0].deltas[0, 0] = 1.0


# -- wire format --------------------------------------------------------------------------


def test_the_wire_round_trip_is_exact(head: HeadMesh) -> None:
    data = head.to_wire()
    magic, version, zero, n, m, k = struct.unpack_from("<4sB3sIII", data)
    assert (magic, version, zero, n, m, k) == (
        b"KFHM",
        1,
        b"\0\0\0",
        head.vertex_count,
        head.triangle_count,
        52,
    )
    back = HeadMesh.from_wire(data)
    for name in ("positions", "normals", "colors", "indices"):
        assert np.array_equal(getattr(back, name), getattr(head, name)), name
    for a, b in zip(back.morphs, head.morphs, strict=True):
        assert np.array_equal(a.indices, b.indices) and np.array_equal(a.deltas, b.deltas)
    assert back.to_wire() == data
    expected = 20 + head.vertex_count * 28 + head.triangle_count * 12
    expected += sum(4 + 16 * len(m) for m in head.morphs)
    assert len(data) == expected


def tiny() -> HeadMesh:
    positions = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
    normals = np.tile(np.array([0, 0, 1], np.float32), (3, 1))
    colors = np.full((3, 4), 255, np.uint8)
    indices = np.array([[0, 1, 2]], np.uint32)
    morphs = [MorphTarget.empty() for _ in range(COUNT)]
    morphs[INDEX["jawOpen"]] = MorphTarget(
        np.array([1], np.uint32), np.array([[0, -1, 0]], np.float32)
    )
    return HeadMesh(positions, normals, colors, indices, tuple(morphs))


def test_a_tiny_mesh_has_the_documented_bytes() -> None:
    data = tiny().to_wire()
    assert data[:20] == b"KFHM\x01\0\0\0" + struct.pack("<III", 3, 1, 52)
    body = 20 + 3 * 12 * 2 + 3 * 4 + 12
    assert data[body : body + 4] == struct.pack("<I", 0)  # eyeBlinkLeft moves nothing
    jaw = body + 4 * INDEX["jawOpen"]
    assert data[jaw : jaw + 20] == struct.pack("<II3f", 1, 1, 0.0, -1.0, 0.0)
    assert len(data) == body + 4 * 52 + 16


def corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[:-1], "truncated"),
        (lambda d: d[:19], "truncated"),
        (lambda d: d[:100], "truncated"),
        (lambda d: d + b"\0", "after the last morph"),
        (lambda d: corrupt(d, 0, b"KFHX"), "magic"),
        (lambda d: corrupt(d, 4, b"\x02"), "version"),
        (lambda d: corrupt(d, 6, b"\x01"), "zero"),
        (lambda d: corrupt(d, 8, struct.pack("<I", 0)), "vertex count"),
        (lambda d: corrupt(d, 8, struct.pack("<I", 4)), "truncated|moves|range|after"),
        (lambda d: corrupt(d, 8, struct.pack("<I", 2**31)), "vertex count"),
        (lambda d: corrupt(d, 12, struct.pack("<I", 2)), "truncated|moves|range|after"),
        (lambda d: corrupt(d, 16, struct.pack("<I", 51)), "52 morph"),
        (lambda d: corrupt(d, 20, struct.pack("<f", float("nan"))), "finite"),
        (lambda d: corrupt(d, 20 + 72 + 12 + 8, struct.pack("<I", 3)), "out of range"),
    ],
)
def test_from_wire_refuses_corrupt_data(change, message: str) -> None:  # type: ignore[no-untyped-def]
    data = change(tiny().to_wire())
    with pytest.raises(AvatarAssetError, match=message):
        HeadMesh.from_wire(data)


def test_from_wire_checks_the_morphs() -> None:
    data = bytearray(tiny().to_wire())
    jaw = 20 + 72 + 12 + 12 + 4 * INDEX["jawOpen"]
    bad_index = corrupt(bytes(data), jaw + 4, struct.pack("<I", 3))
    with pytest.raises(AvatarAssetError, match="out of range"):
        HeadMesh.from_wire(bad_index)
    bad_delta = corrupt(bytes(data), jaw + 8, struct.pack("<f", float("inf")))
    with pytest.raises(AvatarAssetError, match="finite"):
        HeadMesh.from_wire(bad_delta)
    too_many = corrupt(bytes(data), jaw, struct.pack("<I", 4))
    with pytest.raises(AvatarAssetError, match="moves 4 vertices"):
        HeadMesh.from_wire(too_many)


def test_the_error_is_a_local_value_error() -> None:
    assert issubclass(AvatarAssetError, LocalError) and issubclass(AvatarAssetError, ValueError)

"""The server-side face renderer: what changes where on the frame (needs EGL; skipped with the
reason :func:`probe` gives when there is none)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import COUNT, INDEX
from kefu.ai_bridge.avatar.head_mesh import HeadMesh, default_head
from kefu.ai_bridge.avatar.head_shape import LANDMARKS
from kefu.ai_bridge.avatar.render import AvatarRenderError, FaceRenderer, probe
from kefu.errors import LocalError


@pytest.fixture(scope="module")
def head() -> HeadMesh:
    return default_head()


@pytest.fixture(scope="module")
def renderer(head: HeadMesh):  # type: ignore[no-untyped-def]
    reason = probe()
    if reason is not None:
        pytest.skip(f"no EGL rendering here: {reason}")
    with FaceRenderer(head, 512, 512) as r:
        yield r


def pose(**weights: float) -> np.ndarray:
    w = np.zeros(COUNT, np.float32)
    for name, value in weights.items():
        w[INDEX[name]] = value
    return w


def changed(a: np.ndarray, b: np.ndarray, threshold: int = 40) -> np.ndarray:
    """(y, x) of the pixels that differ clearly between two frames."""
    diff = np.abs(a.astype(int) - b.astype(int)).max(axis=2)
    return np.argwhere(diff > threshold)


def landmark(renderer: FaceRenderer, x: float, y: float, z: float) -> np.ndarray:
    return renderer.project(np.array([x, y, z]))


def test_probe_is_cached_and_says_why() -> None:
    first = probe()
    assert probe() is first
    assert first is None or "EGL" in first


def test_a_frame_is_rgb_with_the_face_in_front_of_the_backdrop(renderer: FaceRenderer) -> None:
    frame = renderer.render(pose())
    assert frame.shape == (512, 512, 3) and frame.dtype == np.uint8
    assert frame.flags.c_contiguous
    corners = np.stack([frame[0, 0], frame[0, -1], frame[-1, 0], frame[-1, -1]]).astype(int)
    # A soft grey-blue backdrop: bluish, neither black nor white, the same in all corners.
    assert np.all((corners[:, 2] >= corners[:, 0]) & (corners.min(axis=1) > 120))
    assert np.all(corners.max(axis=1) < 235)
    cheek = landmark(renderer, 0.2, 0.18, 0.36).astype(int)
    skin = frame[cheek[1] - 3 : cheek[1] + 4, cheek[0] - 3 : cheek[0] + 4].reshape(-1, 3)
    r, g, b = skin.mean(axis=0)
    assert r > g > b and r > 150 and r - b > 40  # warm skin, lit
    # The head is centred, the top row first: hair above, the mouth below the eyes.
    eye = landmark(renderer, LANDMARKS.eye_x, LANDMARKS.eye_y, 0.35)
    mouth = landmark(renderer, 0.0, LANDMARKS.mouth_y, 0.45)
    assert eye[1] < mouth[1] and abs(mouth[0] - 256) < 2
    hair = frame[int(eye[1]) - 130, 256].astype(int)
    assert hair.max() < 110  # dark hair above the forehead


def test_jaw_open_changes_the_mouth_and_nothing_else(renderer: FaceRenderer) -> None:
    neutral = renderer.render(pose())
    opened = renderer.render(pose(jawOpen=1.0))
    where = changed(neutral, opened)
    assert len(where) > 1500
    mouth = landmark(renderer, 0.0, LANDMARKS.mouth_y, 0.45)
    eye_y = landmark(renderer, LANDMARKS.eye_x, LANDMARKS.eye_y, 0.35)[1]
    ys, xs = where[:, 0], where[:, 1]
    assert ys.min() > eye_y + 40  # the eyes and everything above them unchanged
    assert np.abs(xs - mouth[0]).max() < 110
    # Centred on the mouth (a little below it: the chin comes down too).
    assert abs(xs.mean() - mouth[0]) < 10 and 0 < ys.mean() - mouth[1] < 50
    # The mouth is open: dark inside, where the lips were.
    inside = opened[int(mouth[1]) + 20, int(mouth[0])].astype(int)
    assert inside.max() < 90 and neutral[int(mouth[1]) + 20, int(mouth[0])].max() > 120


def test_a_blink_changes_the_eyes_only(renderer: FaceRenderer) -> None:
    neutral = renderer.render(pose())
    shut = renderer.render(pose(eyeBlinkLeft=1.0, eyeBlinkRight=1.0))
    where = changed(neutral, shut)
    assert len(where) > 300
    left = landmark(renderer, LANDMARKS.eye_x, LANDMARKS.eye_y, 0.35)
    right = landmark(renderer, -LANDMARKS.eye_x, LANDMARKS.eye_y, 0.35)
    near_left = np.hypot(where[:, 1] - left[0], where[:, 0] - left[1]) < 30
    near_right = np.hypot(where[:, 1] - right[0], where[:, 0] - right[1]) < 30
    assert np.all(near_left | near_right)
    assert near_left.sum() > 100 and near_right.sum() > 100
    # The face's left eye is on the viewer's right.
    assert left[0] > 256 > right[0]
    # Eyes open: a dark pupil in the middle of each; shut: skin there.
    for p in (left, right):
        assert neutral[int(p[1]), int(p[0])].max() < 80
        assert shut[int(p[1]), int(p[0])].mean() > 120
    one = renderer.render(pose(eyeBlinkLeft=1.0))
    assert np.all(np.hypot(*(changed(neutral, one)[:, ::-1] - left).T) < 30)


def test_gaze_moves_the_irises(renderer: FaceRenderer) -> None:
    neutral = renderer.render(pose())
    look = renderer.render(pose(eyeLookOutLeft=1.0, eyeLookInRight=1.0))  # to the face's left
    where = changed(neutral, look)
    assert len(where) > 50
    eye_y = landmark(renderer, LANDMARKS.eye_x, LANDMARKS.eye_y, 0.35)[1]
    assert np.abs(where[:, 0] - eye_y).max() < 25


def test_the_head_pose_turns_the_head_not_the_shoulders(renderer: FaceRenderer) -> None:
    neutral = renderer.render(pose())
    turned = renderer.render(pose(), (0.3, 0.0, 0.0))
    tip = np.array([0.0, LANDMARKS.nose_tip_y, 0.57])
    assert renderer.project(tip, (0.3, 0.0, 0.0))[0] > renderer.project(tip)[0] + 15
    where = changed(neutral, turned)
    assert len(where) > 3000
    assert np.array_equal(neutral[-20:], turned[-20:])  # the bottom rows: shoulders only


def test_720p_centres_the_head_on_a_wider_backdrop(head: HeadMesh) -> None:
    reason = probe()
    if reason is not None:
        pytest.skip(f"no EGL rendering here: {reason}")
    with FaceRenderer(head, 1280, 720, samples=0) as wide:
        frame = wide.render(pose())
        assert frame.shape == (720, 1280, 3)
        top = frame[:400].astype(int)  # the head (the shoulders reach the sides lower)
        diff = np.abs(top - top[:, :1]).max(axis=2)
        cols = np.flatnonzero((diff > 40).any(axis=0))
        assert abs((cols.min() + cols.max()) / 2 - 640) < 30
        assert cols.min() > 200 and cols.max() < 1080


def test_several_renderers_share_the_thread(head: HeadMesh, renderer: FaceRenderer) -> None:
    first = renderer.render(pose(jawOpen=0.5))
    with FaceRenderer(head, 256, 256) as small:
        small_frame = small.render(pose(jawOpen=0.5))
        again = renderer.render(pose(jawOpen=0.5))
        assert np.array_equal(first, again)
        assert np.array_equal(small.render(pose(jawOpen=0.5)), small_frame)


def test_another_thread_and_a_closed_renderer_are_refused(
    head: HeadMesh, renderer: FaceRenderer
) -> None:
    errors: list[BaseException] = []

    def other() -> None:
        try:
            renderer.render(pose())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], AvatarRenderError)
    assert "thread" in str(errors[0])
    closing = FaceRenderer(head, 64, 64)
    closing.close()
    closing.close()
    with pytest.raises(AvatarRenderError, match="closed"):
        closing.render(pose())
    assert issubclass(AvatarRenderError, LocalError)


def test_weights_are_checked_and_clipped(renderer: FaceRenderer) -> None:
    with pytest.raises(ValueError):
        renderer.render(np.zeros(51, np.float32))
    over = renderer.render(np.full(COUNT, 3.0, np.float32))
    ones = renderer.render(np.ones(COUNT, np.float32))
    assert np.array_equal(over, ones)
    nan = renderer.render(np.full(COUNT, np.nan, np.float32))
    assert np.array_equal(nan, renderer.render(pose()))
    with pytest.raises(ValueError):
        FaceRenderer(default_head(), 8, 8)


@pytest.mark.parametrize("antialias", ["fxaa", "msaa", "none"])
def test_every_antialiasing_mode_draws_the_same_face(
    head: HeadMesh, renderer: FaceRenderer, antialias: str
) -> None:
    reference = renderer.render(pose(jawOpen=0.4)).astype(int)
    with FaceRenderer(head, 512, 512, antialias=antialias) as other:
        frame = other.render(pose(jawOpen=0.4)).astype(int)
        assert other.antialias == antialias
        assert (other.samples > 1) == (antialias == "msaa")
    diff = np.abs(frame - reference).max(axis=2)
    assert np.mean(diff > 40) < 0.01  # only edge pixels differ
    with pytest.raises(ValueError, match="antialias"):
        FaceRenderer(head, 64, 64, antialias="ssaa")


def test_an_operators_glb_head_renders(tmp_path, renderer: FaceRenderer) -> None:  # type: ignore[no-untyped-def]
    import importlib.util
    from pathlib import Path

    from kefu.ai_bridge.avatar.head_gltf import load_glb

    spec = importlib.util.spec_from_file_location(
        "avatar_glb_helpers", Path(__file__).with_name("test_head_gltf.py")
    )
    assert spec is not None and spec.loader is not None
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    mesh = load_glb(str(helpers.make_glb(tmp_path / "ball.glb")))
    with FaceRenderer(mesh, 256, 256) as r:
        assert r.cull  # authored normals agree with the winding
        neutral = r.render(pose())
        opened = r.render(pose(jawOpen=1.0))
        middle = neutral[128, 128].astype(int)
        assert middle[0] > middle[2] + 30  # the material's warm colour, lit
        assert len(changed(neutral, opened, 20)) > 50

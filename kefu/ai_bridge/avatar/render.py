"""Headless rendering of the avatar's head: ARKit weights and a head pose to an RGB frame.

:class:`FaceRenderer` draws a :class:`~.head_mesh.HeadMesh` with moderngl on a standalone EGL
context (Mesa llvmpipe on a plain server, a GPU driver where there is one). The morph targets
are blended on the CPU (sparse: only the vertices a shape moves, only the shapes whose weight
is not zero) together with per-shape normal offsets computed once at start, then written to
the vertex buffer; a head pose (yaw, pitch, roll) rotates the head and neck about the neck
joint in the vertex shader while the shoulders stay. Lighting is a warm key, a cool fill, a
soft rim and a sky/ground ambient on a soft grey-blue backdrop; edges are smoothed by an FXAA
pass (or 4x MSAA, sharper and about three times the raster cost on llvmpipe).

**Threads.** An OpenGL context is current on one thread: create, use and close a renderer on
the same thread (a dedicated single-thread executor). :meth:`FaceRenderer.render` from any
other thread raises :class:`AvatarRenderError`. Several renderers (several frame sizes) may
live on that thread; each makes its own context current when it renders.

:func:`probe` says once per process whether a context can be made at all (``None``: yes;
otherwise the reason), for ``/readyz`` and the fall-back to weights only.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import COUNT
from kefu.ai_bridge.avatar.head_mesh import HeadMesh, vertex_normals
from kefu.errors import LocalError

__all__ = ["ANTIALIAS", "AvatarRenderError", "FaceRenderer", "pose_matrix", "probe"]

PIVOT = (0.0, -0.25, -0.05)
"""The neck joint the head pose turns about (mesh units)."""
NECK = (-0.41, -0.25)
"""Heights over which the pose fades in: nothing below the first turns (shoulders), all
above the second does (head)."""
CAMERA_Z = 5.4
"""Camera distance from the origin along +Z."""
TARGET_Y = 0.16
"""Height the camera looks at (between the chin and the eyes: head and shoulders framed)."""
FOV_Y = 19.0
"""Vertical field of view in degrees (the same for every frame size; wider frames show
more background on the sides)."""

_VERTEX = """
#version 330
uniform mat4 u_mvp;
uniform mat3 u_pose;
uniform vec3 u_pivot;
uniform vec2 u_neck;
in vec3 in_pos;
in vec3 in_nrm;
in vec4 in_col;
out vec3 v_pos;
out vec3 v_nrm;
out vec3 v_col;
void main() {
    float w = smoothstep(u_neck.x, u_neck.y, in_pos.y);
    vec3 p = mix(in_pos, u_pose * (in_pos - u_pivot) + u_pivot, w);
    v_nrm = mix(in_nrm, u_pose * in_nrm, w);
    v_pos = p;
    v_col = pow(in_col.rgb, vec3(2.2));
    gl_Position = u_mvp * vec4(p, 1.0);
}
"""

_FRAGMENT = """
#version 330
uniform vec3 u_eye;
in vec3 v_pos;
in vec3 v_nrm;
in vec3 v_col;
out vec4 f_color;
const vec3 KEY_DIR = normalize(vec3(-0.55, 0.55, 0.75));
const vec3 KEY = vec3(1.00, 0.94, 0.86) * 1.75;
const vec3 FILL_DIR = normalize(vec3(0.75, 0.05, 0.6));
const vec3 FILL = vec3(0.62, 0.72, 0.92) * 0.42;
const vec3 CATCH_DIR = normalize(vec3(-0.25, 0.35, 1.0));
const vec3 RIM = vec3(0.85, 0.90, 1.00) * 0.45;
const vec3 SKY = vec3(0.55, 0.60, 0.68);
const vec3 GROUND = vec3(0.28, 0.24, 0.22);
float wrap(vec3 n, vec3 l, float k) { return max((dot(n, l) + k) / (1.0 + k), 0.0); }
void main() {
    vec3 n = normalize(v_nrm);
    if (!gl_FrontFacing) n = -n;
    vec3 v = normalize(u_eye - v_pos);
    vec3 albedo = v_col;
    vec3 ambient = mix(GROUND, SKY, n.y * 0.5 + 0.5) * 0.42;
    vec3 diffuse = KEY * wrap(n, KEY_DIR, 0.25) + FILL * wrap(n, FILL_DIR, 0.4);
    float nv = max(dot(n, v), 0.0);
    vec3 h = normalize(KEY_DIR + v);
    float spec = pow(max(dot(n, h), 0.0), 24.0) * 0.04 + pow(max(dot(n, h), 0.0), 160.0) * 0.1;
    // A catch light near the camera, on what looks like an eye (near-white or near-black).
    vec3 srgb = pow(albedo, vec3(1.0 / 2.2));
    float hi = max(max(srgb.r, srgb.g), srgb.b);
    float sat = (hi - min(min(srgb.r, srgb.g), srgb.b)) / max(hi, 1e-3);
    float gloss = max(smoothstep(0.72, 0.88, min(min(srgb.r, srgb.g), srgb.b)),
                      (1.0 - smoothstep(0.06, 0.2, hi)) * (1.0 - smoothstep(0.25, 0.5, sat)));
    spec *= smoothstep(0.08, 0.3, hi);
    spec += gloss * pow(max(dot(n, normalize(CATCH_DIR + v)), 0.0), 700.0) * 3.0;
    vec3 rim = RIM * pow(1.0 - nv, 3.0) * (0.5 + 0.5 * n.y);
    vec3 c = albedo * (ambient + diffuse) + KEY * spec * 0.35 + rim * (0.35 + albedo);
    c = c / (1.0 + 0.18 * c);
    f_color = vec4(pow(clamp(c, 0.0, 1.0), vec3(1.0 / 2.2)), 1.0);
}
"""

_BACK_VERTEX = """
#version 330
out vec2 v_uv;
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
    v_uv = p;
    gl_Position = vec4(p, 0.999, 1.0);
}
"""

_BACK_FRAGMENT = """
#version 330
uniform float u_aspect;
in vec2 v_uv;
out vec4 f_color;
void main() {
    vec3 top = vec3(0.83, 0.86, 0.89);
    vec3 bottom = vec3(0.66, 0.70, 0.75);
    vec3 c = mix(bottom, top, v_uv.y * 0.5 + 0.5);
    vec2 q = vec2(v_uv.x * u_aspect, v_uv.y - 0.15);
    c += vec3(0.06, 0.055, 0.05) * exp(-dot(q, q) * 1.2);
    f_color = vec4(c, 1.0);
}
"""


_FXAA = """
#version 330
uniform sampler2D u_scene;
uniform vec2 u_texel;
in vec2 v_uv;
out vec4 f_color;
float luma(vec3 c) { return dot(c, vec3(0.299, 0.587, 0.114)); }
vec3 at(vec2 d) { return texture(u_scene, v_uv * 0.5 + 0.5 + d * u_texel).rgb; }
vec3 px(ivec2 d) { return texelFetch(u_scene, ivec2(gl_FragCoord.xy) + d, 0).rgb; }
void main() {
    vec3 m = px(ivec2(0));
    vec3 nw = px(ivec2(-1, -1)), ne = px(ivec2(1, -1)), sw = px(ivec2(-1, 1)), se = px(ivec2(1, 1));
    float lnw = luma(nw), lne = luma(ne), lsw = luma(sw), lse = luma(se), lm = luma(m);
    float lo = min(lm, min(min(lnw, lne), min(lsw, lse)));
    float hi = max(lm, max(max(lnw, lne), max(lsw, lse)));
    if (hi - lo < max(0.04, hi * 0.12)) { f_color = vec4(m, 1.0); return; }
    vec2 dir = vec2(-((lnw + lne) - (lsw + lse)), (lnw + lsw) - (lne + lse));
    float reduce = max((lnw + lne + lsw + lse) * 0.03125, 1.0 / 128.0);
    dir = clamp(dir / (min(abs(dir.x), abs(dir.y)) + reduce), vec2(-8.0), vec2(8.0));
    vec3 a = 0.5 * (at(dir * (1.0 / 3.0 - 0.5)) + at(dir * (2.0 / 3.0 - 0.5)));
    vec3 b = a * 0.5 + 0.25 * (at(dir * -0.5) + at(dir * 0.5));
    float lb = luma(b);
    f_color = vec4((lb < lo || lb > hi) ? a : b, 1.0);
}
"""

ANTIALIAS = ("fxaa", "msaa", "none")


class AvatarRenderError(LocalError):
    """Rendering is not possible here (no EGL, no OpenGL 3.3) or the renderer was misused
    (another thread, closed)."""


def _context() -> Any:
    os.environ.setdefault("LP_NUM_THREADS", "1")
    try:
        import moderngl

        settings: dict[str, Any] = {"backend": "egl"}
        ctx = moderngl.create_context(330, standalone=True, **settings)
    except Exception as exc:  # noqa: BLE001 - any driver failure means "no rendering here"
        raise AvatarRenderError(f"no OpenGL 3.3 context on EGL: {exc}") from exc
    return ctx


@functools.cache
def probe() -> str | None:
    """``None`` when a renderer can be made in this process, else why not (cached)."""
    try:
        ctx = _context()
    except AvatarRenderError as exc:
        return str(exc)
    ctx.release()
    return None


def _perspective(fov_y: float, aspect: float, near: float, far: float) -> NDArray[np.float32]:
    f = 1.0 / math.tan(math.radians(fov_y) / 2.0)
    m = np.zeros((4, 4), np.float32)
    m[0, 0] = f / aspect
    m[1, 1] = f
    m[2, 2] = (far + near) / (near - far)
    m[2, 3] = 2.0 * far * near / (near - far)
    m[3, 2] = -1.0
    return m


def _look_at(
    eye: tuple[float, float, float], target: tuple[float, float, float]
) -> NDArray[np.float32]:
    e, t = np.array(eye, np.float64), np.array(target, np.float64)
    forward = (t - e) / np.linalg.norm(t - e)
    right = np.cross(forward, (0.0, 1.0, 0.0))
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    m = np.identity(4)
    m[0, :3], m[1, :3], m[2, :3] = right, up, -forward
    m[:3, 3] = -m[:3, :3] @ e
    out: NDArray[np.float32] = m.astype(np.float32)
    return out


def pose_matrix(yaw: float, pitch: float, roll: float) -> NDArray[np.float32]:
    """Rotation of a head pose, in radians: yaw about +Y (positive turns the face to its
    left, +X: the viewer's right), pitch about +X (positive looks down), roll about +Z
    (positive tilts the top of the head to the face's right, counter-clockwise as the viewer
    sees it); applied roll, then pitch, then yaw."""
    cy, sy = math.cos(yaw), math.sin(yaw)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cr, sr = math.cos(roll), math.sin(roll)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]])
    out: NDArray[np.float32] = (ry @ rx @ rz).astype(np.float32)
    return out


def _winding_agrees(mesh: HeadMesh, share: float = 0.98) -> bool:
    """True when nearly every triangle's winding points the way its vertex normals do."""
    p, tri = mesh.positions, mesh.indices
    face = np.cross(p[tri[:, 1]] - p[tri[:, 0]], p[tri[:, 2]] - p[tri[:, 0]])
    normal = mesh.normals[tri].sum(axis=1)
    return float(np.mean(np.einsum("ij,ij->i", face, normal) >= 0.0)) >= share


def _normal_offsets(mesh: HeadMesh) -> list[tuple[NDArray[np.intp], NDArray[np.float32]]]:
    """Per morph: the vertices whose normal it turns and by how much (at weight 1)."""
    base = vertex_normals(mesh.positions, mesh.indices)
    out: list[tuple[NDArray[np.intp], NDArray[np.float32]]] = []
    for morph in mesh.morphs:
        if not len(morph):
            out.append((np.zeros(0, np.intp), np.zeros((0, 3), np.float32)))
            continue
        moved = mesh.positions.copy()
        moved[morph.indices] += morph.deltas
        delta = vertex_normals(moved, mesh.indices) - base
        turned = np.flatnonzero(np.abs(delta).max(axis=1) > 1e-4)
        out.append((turned, delta[turned].astype(np.float32)))
    return out


class FaceRenderer:
    """Renders one head at one frame size (see the module doc for the thread rule)."""

    def __init__(
        self,
        mesh: HeadMesh,
        width: int = 512,
        height: int = 512,
        *,
        antialias: str = "fxaa",
        samples: int = 4,
        cull: bool | None = None,
    ) -> None:
        """``antialias``: ``"fxaa"`` (a post pass, ~1 ms), ``"msaa"`` (``samples`` per
        pixel, capped by the driver: sharper, but about three times the raster time on
        llvmpipe) or ``"none"``. ``cull``: skip triangles facing away (about a third of the
        raster time); ``None`` culls when the mesh's winding agrees with its normals (a
        mesh with inside-out parts is drawn double-sided)."""
        if antialias not in ANTIALIAS:
            raise ValueError(f"antialias {antialias!r} is not one of {', '.join(ANTIALIAS)}")
        if not (16 <= width <= 4096 and 16 <= height <= 4096):
            raise ValueError(f"frame size {width}x{height} outside 16..4096")
        self.mesh = mesh
        self.width, self.height = width, height
        self._thread = threading.get_ident()
        self._morphs = [(m.indices.astype(np.intp), m.deltas) for m in mesh.morphs]
        self._normal_morphs = _normal_offsets(mesh)
        self.cull = _winding_agrees(mesh) if cull is None else cull
        above = mesh.positions[mesh.positions[:, 1] > NECK[0]]
        lo, hi = above.min(axis=0) - 0.05, above.max(axis=0) + 0.05
        self._head_corners = np.array(
            [[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])]
        )
        self._ctx: Any = _context()
        ctx = self._ctx
        try:
            msaa = antialias == "msaa" and samples > 1
            samples = min(samples, int(ctx.max_samples)) if msaa else 0
            self.samples = samples
            self.antialias = antialias if (samples or antialias != "msaa") else "none"
            self._program = ctx.program(vertex_shader=_VERTEX, fragment_shader=_FRAGMENT)
            self._back = ctx.program(vertex_shader=_BACK_VERTEX, fragment_shader=_BACK_FRAGMENT)
            self._back["u_aspect"].value = width / height
            self._pos = ctx.buffer(mesh.positions.tobytes(), dynamic=True)
            self._nrm = ctx.buffer(mesh.normals.tobytes(), dynamic=True)
            self._col = ctx.buffer(mesh.colors.tobytes())
            self._ibo = ctx.buffer(mesh.indices.tobytes())
            self._vao = ctx.vertex_array(
                self._program,
                [
                    (self._pos, "3f", "in_pos"),
                    (self._nrm, "3f", "in_nrm"),
                    (self._col, "4f1", "in_col"),
                ],
                index_buffer=self._ibo,
                index_element_size=4,
            )
            self._back_vao = ctx.vertex_array(self._back, [])
            size = (width, height)
            if self.antialias == "fxaa":
                self._scene = ctx.texture(size, 4)
                self._scene.filter = (ctx.LINEAR, ctx.LINEAR)
                self._scene.repeat_x = self._scene.repeat_y = False
                color = self._scene
                self._fxaa = ctx.program(vertex_shader=_BACK_VERTEX, fragment_shader=_FXAA)
                self._fxaa["u_texel"].value = (1.0 / width, 1.0 / height)
                self._fxaa_vao = ctx.vertex_array(self._fxaa, [])
            else:
                color = ctx.renderbuffer(size, 4, samples=samples)
            self._fbo = ctx.framebuffer(
                color_attachments=[color],
                depth_attachment=ctx.depth_renderbuffer(size, samples=samples),
            )
            self._resolve = (
                ctx.framebuffer(color_attachments=[ctx.renderbuffer(size, 4)])
                if self.antialias != "none"
                else self._fbo
            )
            eye = (0.0, TARGET_Y + 0.05, CAMERA_Z)
            mvp = _perspective(FOV_Y, width / height, 3.0, 8.0) @ _look_at(
                eye, (0.0, TARGET_Y, 0.0)
            )
            self._mvp = mvp
            self._program["u_mvp"].write(mvp.T.copy().tobytes())
            self._program["u_eye"].value = eye
            self._program["u_pivot"].value = PIVOT
            self._program["u_neck"].value = NECK
        except Exception as exc:
            ctx.release()
            raise AvatarRenderError(f"cannot set up the renderer: {exc}") from exc
        self._closed = False

    def render(
        self,
        weights: NDArray[np.floating[Any]],
        head: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> NDArray[np.uint8]:
        """One frame: (height, width, 3) RGB, top row first. ``weights``: 52 in [0, 1] (ARKit
        order; values outside are clipped); ``head``: yaw, pitch, roll in radians."""
        if self._closed:
            raise AvatarRenderError("the renderer is closed")
        if threading.get_ident() != self._thread:
            raise AvatarRenderError("a FaceRenderer must be used on the thread that made it")
        w = np.clip(np.nan_to_num(np.asarray(weights, np.float32)), 0.0, 1.0)
        if w.shape != (COUNT,):
            raise ValueError(f"expected {COUNT} weights, got shape {w.shape}")
        positions = self.mesh.positions.copy()
        normals = self.mesh.normals.copy()
        for k in np.flatnonzero(w):
            idx, delta = self._morphs[k]
            positions[idx] += w[k] * delta
            nidx, ndelta = self._normal_morphs[k]
            normals[nidx] += w[k] * ndelta
        with self._ctx:
            self._pos.write(positions.tobytes())
            self._nrm.write(normals.tobytes())
            self._program["u_pose"].write(pose_matrix(*head).T.copy().tobytes())
            self._fbo.use()
            self._fbo.clear(depth=1.0)
            self._ctx.disable(self._ctx.CULL_FACE | self._ctx.DEPTH_TEST)
            self._back_vao.render(vertices=3)
            self._ctx.enable(self._ctx.DEPTH_TEST | (self._ctx.CULL_FACE if self.cull else 0))
            self._vao.render()
            if self.antialias == "fxaa":
                # The backdrop is smooth: copy it, smooth only the box round the head.
                self._ctx.copy_framebuffer(self._resolve, self._fbo)
                self._resolve.use()
                self._ctx.disable(self._ctx.CULL_FACE | self._ctx.DEPTH_TEST)
                self._ctx.scissor = self._head_box(head)
                self._scene.use(0)
                self._fxaa_vao.render(vertices=3)
                self._ctx.scissor = None
            elif self.antialias == "msaa":
                self._ctx.copy_framebuffer(self._resolve, self._fbo)
            data = self._resolve.read(components=3, alignment=1)
        frame = np.frombuffer(data, np.uint8).reshape(self.height, self.width, 3)
        return np.ascontiguousarray(frame[::-1])

    def _head_box(self, head: tuple[float, float, float]) -> tuple[int, int, int, int]:
        """Scissor box (x, y from the bottom, width, height) round the posed head."""
        px = self.project(self._head_corners, head)
        lo = np.floor(px.min(axis=0)).astype(int) - 4
        hi = np.ceil(px.max(axis=0)).astype(int) + 4
        x0, x1 = max(0, lo[0]), min(self.width, hi[0])
        y0, y1 = max(0, self.height - hi[1]), min(self.height, self.height - lo[1])
        return x0, y0, max(0, x1 - x0), max(0, y1 - y0)

    def project(
        self, points: NDArray[np.floating[Any]], head: tuple[float, float, float] = (0.0, 0.0, 0.0)
    ) -> NDArray[np.float64]:
        """Pixel coordinates (x right, y down, as in :meth:`render`'s array) of mesh-space
        ``points`` (..., 3) under a head pose, for tests and overlays."""
        p = np.asarray(points, np.float64).reshape(-1, 3)
        w = np.clip((p[:, 1] - NECK[0]) / (NECK[1] - NECK[0]), 0.0, 1.0)
        w = w * w * (3.0 - 2.0 * w)
        pivot = np.array(PIVOT)
        turned = (p - pivot) @ pose_matrix(*head).T.astype(np.float64) + pivot
        p = p + w[:, None] * (turned - p)
        clip = np.concatenate([p, np.ones((len(p), 1))], axis=1) @ self._mvp.T.astype(np.float64)
        ndc = clip[:, :2] / clip[:, 3:4]
        px = np.stack(
            [(ndc[:, 0] + 1.0) * 0.5 * self.width, (1.0 - ndc[:, 1]) * 0.5 * self.height], axis=1
        )
        out: NDArray[np.float64] = px.reshape(*np.shape(points)[:-1], 2)
        return out

    def close(self) -> None:
        """Free the context (on the renderer's thread); later renders raise."""
        if not self._closed:
            self._closed = True
            self._ctx.release()

    def __enter__(self) -> FaceRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

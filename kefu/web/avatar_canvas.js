// The caller page's digital human drawn with WebGL (docs/avatar.md): the head mesh
// (avatar_mesh.js) morphed by the faces a WeightsPlayout (avatar_playout.js) hands out, lit
// and framed as a video-call portrait.
//
//   webglAvailable()             whether this browser can make a WebGL context
//   portraitCamera(bounds, ...)  the camera that frames the head
//   AvatarCanvas                 the WebGL view; never throws into the call

import { blendPositions } from "./avatar_mesh.js";
import { BLENDSHAPE_COUNT, defaultNow } from "./avatar_playout.js";
import { AVATAR_TEXT } from "./avatar_view.js";

// --- camera ---------------------------------------------------------------------------------

function perspective(fovY, aspect, near, far) {
  const f = 1 / Math.tan(fovY / 2);
  const nf = 1 / (near - far);
  return new Float32Array([f / aspect, 0, 0, 0, 0, f, 0, 0, 0, 0, (far + near) * nf, -1, 0, 0, 2 * far * near * nf, 0]);
}

function lookAt(eye, target, up) {
  const sub = (a, b) => [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
  const norm = (v) => { const l = Math.hypot(...v) || 1; return v.map((x) => x / l); };
  const cross = (a, b) => [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]];
  const dot = (a, b) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
  const z = norm(sub(eye, target));
  const x = norm(cross(up, z));
  const y = cross(z, x);
  return new Float32Array([x[0], y[0], z[0], 0, x[1], y[1], z[1], 0, x[2], y[2], z[2], 0,
    -dot(x, eye), -dot(y, eye), -dot(z, eye), 1]);
}

function multiply(a, b) {
  const out = new Float32Array(16);
  for (let c = 0; c < 4; c += 1) {
    for (let r = 0; r < 4; r += 1) {
      let s = 0;
      for (let k = 0; k < 4; k += 1) s += a[k * 4 + r] * b[c * 4 + k];
      out[c * 4 + r] = s;
    }
  }
  return out;
}

/**
 * A video-call portrait of the head: the camera in front (+Z), a narrow lens, the head
 * centred, filling about three quarters of the picture's height (or width, whichever is
 * tighter). Returns {viewProjection (Float32Array 16, column-major), eye}.
 */
export function portraitCamera(bounds, aspect, fovDeg = 24) {
  const { min, max, center } = bounds;
  const fov = (fovDeg * Math.PI) / 180;
  const t = Math.tan(fov / 2);
  const height = Math.max(1e-3, max[1] - min[1]);
  const width = Math.max(1e-3, max[0] - min[0]);
  const fill = 0.75; // leaves room for an open jaw
  const distance = Math.max(height / (2 * fill * t), width / (2 * fill * t * Math.max(aspect, 1e-3)))
    + (max[2] - center[2]);
  const target = [center[0], center[1], center[2]];
  const eye = [target[0], target[1], center[2] + distance];
  const near = Math.max(0.01, distance * 0.05);
  const far = distance * 4 + (max[2] - min[2]);
  return { viewProjection: multiply(perspective(fov, aspect, near, far), lookAt(eye, target, [0, 1, 0])), eye };
}

// --- the WebGL view -------------------------------------------------------------------------

const VERTEX_SHADER = `
attribute vec3 aPosition;
attribute vec3 aNormal;
attribute vec4 aColor;
uniform mat4 uViewProjection;
varying vec3 vNormal;
varying vec3 vPosition;
varying vec4 vColor;
void main() {
  vNormal = aNormal;
  vPosition = aPosition;
  vColor = aColor;
  gl_Position = uViewProjection * vec4(aPosition, 1.0);
}`;

// A key light from the upper left front, a dimmer fill from the right, a little ambient and
// rim light, a soft highlight. Back faces (the inside of the mouth) are lit from their side.
const FRAGMENT_SHADER = `
precision mediump float;
varying vec3 vNormal;
varying vec3 vPosition;
varying vec4 vColor;
uniform vec3 uEye;
uniform vec3 uKey;
uniform vec3 uFill;
void main() {
  vec3 n = normalize(vNormal);
  if (!gl_FrontFacing) n = -n;
  vec3 v = normalize(uEye - vPosition);
  float key = max(dot(n, uKey), 0.0);
  float fill = max(dot(n, uFill), 0.0);
  float rim = pow(1.0 - max(dot(n, v), 0.0), 3.0);
  float spec = pow(max(dot(n, normalize(uKey + v)), 0.0), 40.0);
  vec3 base = vColor.rgb;
  vec3 lit = base * (0.30 + 0.78 * key + 0.28 * fill) + 0.10 * rim + 0.07 * spec;
  gl_FragColor = vec4(min(lit, vec3(1.0)), 1.0);
}`;

const norm3 = (v) => { const l = Math.hypot(...v); return new Float32Array(v.map((x) => x / l)); };
const KEY_LIGHT = norm3([-0.45, 0.55, 0.75]);
const FILL_LIGHT = norm3([0.6, 0.1, 0.55]);

const NEUTRAL = new Float32Array(BLENDSHAPE_COUNT);
export const NO_WEBGL_TEXT = AVATAR_TEXT.noWebgl;

/** Whether this browser can make a WebGL context (tries a throwaway canvas). */
export function webglAvailable(doc = globalThis.document) {
  try {
    const canvas = doc.createElement("canvas");
    const gl = canvas.getContext("webgl") || canvas.getContext("experimental-webgl");
    const lose = gl && gl.getExtension("WEBGL_lose_context");
    if (lose) lose.loseContext();
    return Boolean(gl);
  } catch {
    return false;
  }
}

/**
 * The avatar drawn with WebGL 1 on `canvas`. Never throws: without WebGL (or when the shaders
 * fail) `ok` is false and `problem` says why, and every method does nothing.
 *
 *   const view = new AvatarCanvas(canvas, {playout});
 *   if (view.ok) { view.setMesh(mesh); view.start(); }  …  view.destroy();
 *
 * Each animation frame asks the playout for the face, blends the mesh's positions on the
 * CPU (blendPositions) and uploads them with bufferSubData; normals stay the neutral ones.
 */
export class AvatarCanvas {
  constructor(canvas, { playout = null, requestFrame = globalThis.requestAnimationFrame,
                        cancelFrame = globalThis.cancelAnimationFrame, now = defaultNow,
                        onProblem = null } = {}) {
    this.canvas = canvas;
    this.playout = playout;
    this.now = now;
    this.onProblem = onProblem;
    this._requestFrame = requestFrame ? requestFrame.bind(globalThis) : null;
    this._cancelFrame = cancelFrame ? cancelFrame.bind(globalThis) : null;
    this.ok = false;
    this.problem = null;
    this.mesh = null;
    this.frames = 0; // frames drawn
    this._raf = null;
    this._running = false;
    this._lost = false;
    this._gl = null;
    this._res = null;
    this._positions = null;
    this._lastWeights = new Float32Array(BLENDSHAPE_COUNT).fill(NaN);
    this._size = [0, 0];
    this._tick = () => this._frame();
    this._onLost = (ev) => {
      if (ev && ev.preventDefault) ev.preventDefault(); // so that the context can come back
      this._lost = true;
      this._res = null;
    };
    this._onRestored = () => {
      this._lost = false;
      if (!this._gl) return;
      try {
        this._setup();
        if (this.mesh) this._upload(this.mesh);
      } catch (err) {
        this._fail(`the graphics could not be restored (${err.message})`);
      }
    };
    let gl = null;
    try {
      const options = { antialias: true, alpha: true, premultipliedAlpha: true, depth: true,
        powerPreference: "low-power" };
      gl = canvas.getContext("webgl", options) || canvas.getContext("experimental-webgl", options);
    } catch {
      gl = null;
    }
    if (!gl) {
      this.problem = NO_WEBGL_TEXT;
      return;
    }
    this._gl = gl;
    try {
      this._setup();
      this.ok = true;
      if (canvas.addEventListener) {
        canvas.addEventListener("webglcontextlost", this._onLost);
        canvas.addEventListener("webglcontextrestored", this._onRestored);
      }
    } catch (err) {
      this.problem = `the avatar's graphics could not start (${err.message})`;
      this._release();
    }
  }

  /** Uploads the mesh (avatar_mesh.js parseHeadMesh); false (and `problem`) if it cannot be drawn. */
  setMesh(mesh) {
    if (!this.ok) return false;
    try {
      this._upload(mesh);
      this.mesh = mesh;
      this._positions = new Float32Array(mesh.positions.length);
      this._lastWeights.fill(NaN);
      return true;
    } catch (err) {
      this._fail(err.message);
      return false;
    }
  }

  /** Starts drawing on every animation frame (until stop or destroy). */
  start() {
    if (!this.ok || this._running) return this.ok;
    this._running = true;
    this._schedule();
    return true;
  }

  /** Stops drawing; the GL resources stay (start draws again). */
  stop() {
    this._running = false;
    if (this._raf !== null && this._cancelFrame) this._cancelFrame(this._raf);
    this._raf = null;
  }

  /** Stops and releases everything (buffers, program, the context itself). */
  destroy() {
    this.stop();
    if (this.canvas && this.canvas.removeEventListener) {
      this.canvas.removeEventListener("webglcontextlost", this._onLost);
      this.canvas.removeEventListener("webglcontextrestored", this._onRestored);
    }
    this._release();
    this.ok = false;
    this.mesh = null;
  }

  /** Draws one frame with these weights (null: the neutral face). */
  draw(weights) {
    if (!this.ok || !this.mesh || this._lost || !this._res) return false;
    const gl = this._gl;
    const res = this._res;
    const resized = this._fitCanvas();
    const face = weights || NEUTRAL;
    if (!resized && this.frames > 0 && sameWeights(face, this._lastWeights)) return false; // nothing moved
    this._lastWeights.set(face);
    const positions = blendPositions(this.mesh, this._lastWeights, this._positions);
    gl.bindBuffer(gl.ARRAY_BUFFER, res.position);
    gl.bufferSubData(gl.ARRAY_BUFFER, 0, positions);
    const [width, height] = this._size;
    gl.viewport(0, 0, width, height);
    gl.clearColor(0, 0, 0, 0);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.useProgram(res.program);
    const camera = portraitCamera(this.mesh.bounds, width / Math.max(1, height));
    gl.uniformMatrix4fv(res.uViewProjection, false, camera.viewProjection);
    gl.uniform3fv(res.uEye, new Float32Array(camera.eye));
    gl.uniform3fv(res.uKey, KEY_LIGHT);
    gl.uniform3fv(res.uFill, FILL_LIGHT);
    gl.drawElements(gl.TRIANGLES, res.indexCount, res.indexType, 0);
    this.frames += 1;
    return true;
  }

  // --- internals ---

  _schedule() {
    if (!this._running || !this._requestFrame) return;
    this._raf = this._requestFrame(this._tick);
  }

  _frame() {
    this._raf = null;
    if (!this._running) return;
    try {
      const shown = this.playout ? this.playout.frameAt(this.now()) : null;
      this.draw(shown ? shown.weights : null);
    } catch (err) {
      this._fail(`drawing failed (${err.message})`);
      return;
    }
    this._schedule();
  }

  _fail(problem) {
    this.problem = problem;
    this.destroy();
    if (this.onProblem) {
      try { this.onProblem(problem); } catch { /* ignore */ }
    }
  }

  _fitCanvas() {
    const canvas = this.canvas;
    const ratio = Math.min(2, globalThis.devicePixelRatio || 1);
    const width = Math.max(1, Math.round((canvas.clientWidth || canvas.width || 320) * ratio));
    const height = Math.max(1, Math.round((canvas.clientHeight || canvas.height || 240) * ratio));
    if (width === this._size[0] && height === this._size[1]) return false;
    if (canvas.width !== width) canvas.width = width;
    if (canvas.height !== height) canvas.height = height;
    this._size = [width, height];
    return true;
  }

  _setup() {
    const gl = this._gl;
    const compile = (type, source) => {
      const shader = gl.createShader(type);
      gl.shaderSource(shader, source);
      gl.compileShader(shader);
      if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) {
        const log = gl.getShaderInfoLog(shader);
        gl.deleteShader(shader);
        throw new Error(`shader: ${log}`);
      }
      return shader;
    };
    const vs = compile(gl.VERTEX_SHADER, VERTEX_SHADER);
    const fs = compile(gl.FRAGMENT_SHADER, FRAGMENT_SHADER);
    const program = gl.createProgram();
    gl.attachShader(program, vs);
    gl.attachShader(program, fs);
    gl.linkProgram(program);
    gl.deleteShader(vs);
    gl.deleteShader(fs);
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) {
      const log = gl.getProgramInfoLog(program);
      gl.deleteProgram(program);
      throw new Error(`program: ${log}`);
    }
    this._res = {
      program,
      aPosition: gl.getAttribLocation(program, "aPosition"),
      aNormal: gl.getAttribLocation(program, "aNormal"),
      aColor: gl.getAttribLocation(program, "aColor"),
      uViewProjection: gl.getUniformLocation(program, "uViewProjection"),
      uEye: gl.getUniformLocation(program, "uEye"),
      uKey: gl.getUniformLocation(program, "uKey"),
      uFill: gl.getUniformLocation(program, "uFill"),
      position: null, normal: null, color: null, index: null, indexCount: 0, indexType: 0,
    };
    gl.enable(gl.DEPTH_TEST);
    gl.disable(gl.CULL_FACE); // the winding of every part of the mesh is not promised
    this._size = [0, 0];
    this._lastWeights.fill(NaN);
  }

  _upload(mesh) {
    const gl = this._gl;
    const res = this._res;
    if (!res) throw new Error("the graphics context is not ready");
    let indices = mesh.indices;
    let indexType = gl.UNSIGNED_SHORT;
    if (mesh.vertexCount > 65536) {
      if (!gl.getExtension("OES_element_index_uint")) {
        throw new Error(`the head has ${mesh.vertexCount} vertices, more than this browser's WebGL can index`);
      }
      indexType = gl.UNSIGNED_INT;
    } else {
      indices = Uint16Array.from(mesh.indices);
    }
    for (const name of ["position", "normal", "color", "index"]) {
      if (res[name]) gl.deleteBuffer(res[name]);
    }
    const attribute = (location, data, size, type, normalized, usage) => {
      const buffer = gl.createBuffer();
      gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
      gl.bufferData(gl.ARRAY_BUFFER, data, usage);
      if (location >= 0) {
        gl.enableVertexAttribArray(location);
        gl.vertexAttribPointer(location, size, type, normalized, 0, 0);
      }
      return buffer;
    };
    res.position = attribute(res.aPosition, mesh.positions, 3, gl.FLOAT, false, gl.DYNAMIC_DRAW);
    res.normal = attribute(res.aNormal, mesh.normals, 3, gl.FLOAT, false, gl.STATIC_DRAW);
    res.color = attribute(res.aColor, mesh.colors, 4, gl.UNSIGNED_BYTE, true, gl.STATIC_DRAW);
    res.index = gl.createBuffer();
    gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, res.index);
    gl.bufferData(gl.ELEMENT_ARRAY_BUFFER, indices, gl.STATIC_DRAW);
    res.indexCount = indices.length;
    res.indexType = indexType;
  }

  _release() {
    const gl = this._gl;
    this._gl = null;
    const res = this._res;
    this._res = null;
    if (!gl) return;
    try {
      if (res && !gl.isContextLost()) {
        for (const name of ["position", "normal", "color", "index"]) if (res[name]) gl.deleteBuffer(res[name]);
        gl.deleteProgram(res.program);
      }
      const lose = gl.getExtension("WEBGL_lose_context");
      if (lose) lose.loseContext(); // browsers hold a few contexts at most: give this one back
    } catch { /* already gone */ }
  }
}

function sameWeights(a, b) {
  for (let i = 0; i < BLENDSHAPE_COUNT; i += 1) if (a[i] !== b[i]) return false;
  return true;
}

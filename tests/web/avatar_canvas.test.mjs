// The caller page's WebGL avatar (kefu/web/avatar_canvas.js): the portrait camera, and the
// view against a stub context (no browser here) morphing a hand-built head with the faces of
// a WeightsPlayout. `node --test tests/web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { buildMesh, frame, loadWebModule, triangle } from "./avatar_support.mjs";

const { AvatarCanvas, NO_WEBGL_TEXT, portraitCamera } = await loadWebModule("avatar_canvas.js");
const { parseHeadMesh } = await loadWebModule("avatar_mesh.js");
const { WeightsPlayout } = await loadWebModule("avatar_playout.js");

// --- the camera -------------------------------------------------------------------------------

test("the portrait camera frames the whole head in the middle", () => {
  const bounds = { min: [-0.8, -1, -0.7], max: [0.8, 1, 0.9], center: [0, 0, 0.1] };
  for (const aspect of [4 / 3, 3 / 4, 16 / 9]) {
    const { viewProjection: m, eye } = portraitCamera(bounds, aspect);
    assert.ok(eye[2] > 2);
    const project = ([x, y, z]) => {
      const w = m[3] * x + m[7] * y + m[11] * z + m[15];
      return [(m[0] * x + m[4] * y + m[8] * z + m[12]) / w, (m[1] * x + m[5] * y + m[9] * z + m[13]) / w,
        (m[2] * x + m[6] * y + m[10] * z + m[14]) / w];
    };
    const center = project([0, 0, 0.1]);
    assert.ok(Math.abs(center[0]) < 1e-5 && Math.abs(center[1]) < 1e-5, `${aspect}: ${center}`);
    for (const x of [-0.8, 0.8]) {
      for (const y of [-1, 1]) {
        for (const z of [-0.7, 0.9]) {
          const p = project([x, y, z]);
          assert.ok(p.every((c) => c > -1 && c < 1), `${aspect}: ${[x, y, z]} → ${p}`);
        }
      }
    }
    const top = project([0, 1, 0.1]);
    const bottom = project([0, -1, 0.1]);
    assert.ok(top[1] - bottom[1] > 1.2, `${aspect}: the head fills the picture (${top[1] - bottom[1]})`);
  }
});

// --- the WebGL view ---------------------------------------------------------------------------

// A WebGL 1 context that records every call: constants are numbers, objects are tokens.
function stubGl({ compiles = true, extensions = {} } = {}) {
  const calls = [];
  let next = 1;
  const gl = new Proxy({}, {
    get(target, name) {
      if (typeof name !== "string") return undefined;
      if (/^[A-Z0-9_]+$/.test(name)) return name.length; // any distinct-enough number
      if (name === "calls") return calls;
      return (...args) => {
        calls.push([name, ...args]);
        switch (name) {
          case "getShaderParameter": return compiles;
          case "getProgramParameter": return true;
          case "getShaderInfoLog": return "ERROR: 0:1: syntax";
          case "getAttribLocation": return ["aPosition", "aNormal", "aColor"].indexOf(args[1]);
          case "getExtension": return extensions[args[0]] || null;
          case "isContextLost": return false;
          default: return name.startsWith("create") || name === "getUniformLocation" ? { id: next++ } : undefined;
        }
      };
    },
  });
  return gl;
}

function stubCanvas(gl) {
  const listeners = {};
  return {
    clientWidth: 400, clientHeight: 300, width: 300, height: 150, listeners,
    getContext: (kind) => (typeof gl === "function" ? gl(kind) : gl),
    addEventListener: (type, fn) => { listeners[type] = fn; },
    removeEventListener: (type) => { delete listeners[type]; },
  };
}

function fakeFrames() {
  const pending = new Map();
  let id = 0;
  return {
    pending,
    request: (fn) => { id += 1; pending.set(id, fn); return id; },
    cancel: (i) => pending.delete(i),
    run() { const fns = [...pending.values()]; pending.clear(); fns.forEach((fn) => fn(0)); },
  };
}

test("without WebGL the view says so and never throws", () => {
  for (const getContext of [() => null, () => { throw new Error("blocked"); }]) {
    const view = new AvatarCanvas(stubCanvas(getContext));
    assert.equal(view.ok, false);
    assert.equal(view.problem, NO_WEBGL_TEXT);
    assert.equal(view.setMesh(parseHeadMesh(buildMesh(triangle()))), false);
    assert.equal(view.start(), false);
    assert.equal(view.draw(new Float32Array(52)), false);
    view.stop();
    view.destroy();
  }
  const broken = new AvatarCanvas(stubCanvas(stubGl({ compiles: false })));
  assert.equal(broken.ok, false);
  assert.match(broken.problem, /could not start \(shader: ERROR/);
});

test("the view morphs the mesh each animation frame and releases everything on stop", () => {
  const lose = { lost: 0, loseContext() { this.lost += 1; } };
  const gl = stubGl({ extensions: { WEBGL_lose_context: lose } });
  const canvas = stubCanvas(gl);
  const frames = fakeFrames();
  let clock = 0;
  const playout = new WeightsPlayout({ delayMs: 0, now: () => clock });
  const view = new AvatarCanvas(canvas, { playout, requestFrame: frames.request, cancelFrame: frames.cancel,
    now: () => clock });
  assert.equal(view.ok, true);
  assert.ok(canvas.listeners.webglcontextlost);
  const mesh = parseHeadMesh(buildMesh(triangle()));
  assert.equal(view.setMesh(mesh), true);
  const bufferData = gl.calls.filter((c) => c[0] === "bufferData");
  assert.equal(bufferData.length, 4); // positions, normals, colours, indices
  assert.ok(bufferData[3][2] instanceof Uint16Array);
  assert.ok(bufferData[2][2] instanceof Uint8Array);
  assert.equal(bufferData[0][3], "DYNAMIC_DRAW".length);
  assert.equal(view.start(), true);
  assert.equal(frames.pending.size, 1);

  const uploads = () => gl.calls.filter((c) => c[0] === "bufferSubData").map((c) => Array.from(c[3]));
  frames.run(); // no frame yet: the neutral face
  assert.deepEqual(uploads().at(-1), Array.from(mesh.positions));
  assert.equal(canvas.width, 400);
  assert.equal(canvas.height, 300);
  frames.run(); // nothing moved: nothing drawn
  assert.equal(uploads().length, 1);
  playout.push(frame(0, 0.5), 0);
  frames.run();
  const moved = uploads().at(-1);
  assert.ok(Math.abs(moved[4] - -1.25) < 1e-6 && Math.abs(moved[6] - 1.05) < 1e-6, String(moved));
  assert.equal(gl.calls.filter((c) => c[0] === "drawElements").at(-1)[2], 3);
  assert.equal(view.frames, 2);

  view.stop();
  assert.equal(frames.pending.size, 0);
  view.start();
  view.destroy();
  assert.equal(frames.pending.size, 0);
  assert.equal(lose.lost, 1);
  assert.equal(gl.calls.filter((c) => c[0] === "deleteBuffer").length, 4);
  assert.equal(gl.calls.filter((c) => c[0] === "deleteProgram").length, 1);
  assert.equal(canvas.listeners.webglcontextlost, undefined);
  assert.equal(view.ok, false);
  assert.equal(view.draw(null), false);
});

test("a lost context pauses drawing; a failure in a frame ends the view, not the page", () => {
  const gl = stubGl();
  const canvas = stubCanvas(gl);
  const frames = fakeFrames();
  const problems = [];
  const playout = { frameAt: () => null };
  const view = new AvatarCanvas(canvas, { playout, requestFrame: frames.request, cancelFrame: frames.cancel,
    onProblem: (p) => problems.push(p) });
  view.setMesh(parseHeadMesh(buildMesh(triangle())));
  view.start();
  let prevented = false;
  canvas.listeners.webglcontextlost({ preventDefault: () => { prevented = true; } });
  assert.equal(prevented, true);
  frames.run();
  assert.equal(view.frames, 0);
  canvas.listeners.webglcontextrestored();
  frames.run();
  assert.equal(view.frames, 1);
  playout.frameAt = () => { throw new Error("boom"); };
  frames.run();
  assert.deepEqual(problems, ["drawing failed (boom)"]);
  assert.equal(view.ok, false);
  assert.equal(frames.pending.size, 0);
});

test("a head too big for 16-bit indices needs OES_element_index_uint", () => {
  const big = { vertexCount: 70000, positions: new Float32Array(210000), normals: new Float32Array(210000),
    colors: new Uint8Array(280000), indices: new Uint32Array([0, 1, 69999]), morphs: [],
    bounds: { min: [-1, -1, -1], max: [1, 1, 1], center: [0, 0, 0] } };
  const without = new AvatarCanvas(stubCanvas(stubGl()), { requestFrame: null });
  assert.equal(without.setMesh(big), false);
  assert.match(without.problem, /70000 vertices/);
  const gl = stubGl({ extensions: { OES_element_index_uint: {} } });
  const withExt = new AvatarCanvas(stubCanvas(gl));
  assert.equal(withExt.setMesh(big), true);
  assert.ok(gl.calls.filter((c) => c[0] === "bufferData").at(-1)[2] instanceof Uint32Array);
  withExt.destroy();
});

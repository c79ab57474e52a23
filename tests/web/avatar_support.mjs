// What the caller page's avatar suites share (avatar_mesh, avatar_playout, avatar_view and
// avatar_canvas .test.mjs): loading kefu/web's modules, a hand-built head mesh, weights frames.
// Not a suite itself (node --test runs *.test.mjs).
//
// The modules are browser ES modules in a package without "type": "module": they are loaded
// from data: URLs, each import of a sibling (from "./x.js") pointed at that sibling's data:
// URL, so that a module and its importers share one instance.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

export const read = (path) => readFileSync(new URL(path, import.meta.url), "utf8");
const dataUrl = (source) => `data:text/javascript;charset=utf-8,${encodeURIComponent(source)}`;

const urls = new Map();
function moduleUrl(name) {
  if (!urls.has(name)) {
    const source = read(`../../kefu/web/${name}`)
      .replace(/from "\.\/([\w.-]+\.js)"/g, (_, sibling) => `from "${moduleUrl(sibling)}"`);
    assert.ok(!/(from|import) "\.\.?\//.test(source), `${name}: an import not pointed at a data: URL`);
    urls.set(name, dataUrl(source));
  }
  return urls.get(name);
}

/** One of kefu/web's modules by file name ("avatar_canvas.js"), its sibling imports resolved. */
export const loadWebModule = (name) => import(moduleUrl(name));

const { BLENDSHAPES } = await loadWebModule("avatar_playout.js");

// --- the head mesh ----------------------------------------------------------------------------

// A little-endian head mesh built by hand, as the server's head_mesh.py writes it.
export function buildMesh({ positions, normals, colors, indices, morphs, magic = "KFHM", version = 1,
                            reserved = [0, 0, 0], morphCount = morphs.length, trailing = 0 }) {
  const n = positions.length / 3;
  const m = indices.length / 3;
  let size = 20 + 12 * n + 12 * n + 4 * n + 12 * m + trailing;
  for (const morph of morphs) size += 4 + 16 * morph.indices.length;
  const view = new DataView(new ArrayBuffer(size));
  for (let i = 0; i < 4; i += 1) view.setUint8(i, magic.charCodeAt(i));
  view.setUint8(4, version);
  reserved.forEach((b, i) => view.setUint8(5 + i, b));
  view.setUint32(8, n, true);
  view.setUint32(12, m, true);
  view.setUint32(16, morphCount, true);
  let o = 20;
  const f32 = (v) => { view.setFloat32(o, v, true); o += 4; };
  const u32 = (v) => { view.setUint32(o, v, true); o += 4; };
  positions.forEach(f32);
  normals.forEach(f32);
  colors.forEach((c) => { view.setUint8(o, c); o += 1; });
  indices.forEach(u32);
  for (const morph of morphs) {
    u32(morph.indices.length);
    morph.indices.forEach(u32);
    morph.deltas.forEach(f32);
  }
  return view.buffer;
}

export const JAW = BLENDSHAPES.indexOf("jawOpen");
export function triangle(over = {}) {
  const morphs = Array.from({ length: 52 }, () => ({ indices: [], deltas: [] }));
  morphs[0] = { indices: [0], deltas: [0, 0, 0.25] }; // eyeBlinkLeft moves vertex 0 forward
  morphs[JAW] = { indices: [1, 2], deltas: [0, -0.5, 0, 0.1, 0, 0] };
  return {
    positions: [0, 1, 0, -1, -1, 0.5, 1, -1, -0.5],
    normals: [0, 0, 1, 0, 0, 1, 0, 0, 1],
    colors: [255, 200, 180, 255, 10, 20, 30, 255, 1, 2, 3, 128],
    indices: [0, 1, 2],
    morphs,
    ...over,
  };
}

// --- weights frames ---------------------------------------------------------------------------

/** A decoded weights frame (as decodeWeightsFrame returns) with jawOpen at `level`. */
export function frame(tsMs, level = 0, over = {}) {
  const weights = new Float32Array(52);
  weights[JAW] = level;
  return { speaking: true, listening: false, reset: false, seq: tsMs & 0xffff, tsMs, weights, ...over };
}

export const jaw = (shown) => (shown ? Math.round(shown.weights[JAW] * 1000) / 1000 : null);

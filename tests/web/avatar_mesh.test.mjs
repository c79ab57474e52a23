// The caller page's head mesh (kefu/web/avatar_mesh.js): its binary format and morph
// blending. `node --test tests/web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { JAW, buildMesh, loadWebModule, triangle } from "./avatar_support.mjs";

const { HEAD_MESH_URL, HeadMeshError, MORPH_COUNT, blendPositions, loadHeadMesh, parseHeadMesh } =
  await loadWebModule("avatar_mesh.js");

test("parseHeadMesh reads a hand-built mesh", () => {
  const mesh = parseHeadMesh(buildMesh(triangle()));
  assert.equal(mesh.vertexCount, 3);
  assert.equal(mesh.triangleCount, 1);
  assert.equal(mesh.version, 1);
  assert.deepEqual(Array.from(mesh.positions), [0, 1, 0, -1, -1, 0.5, 1, -1, -0.5]);
  assert.deepEqual(Array.from(mesh.normals), [0, 0, 1, 0, 0, 1, 0, 0, 1]);
  assert.ok(mesh.colors instanceof Uint8Array);
  assert.deepEqual(Array.from(mesh.colors), [255, 200, 180, 255, 10, 20, 30, 255, 1, 2, 3, 128]);
  assert.ok(mesh.indices instanceof Uint32Array);
  assert.deepEqual(Array.from(mesh.indices), [0, 1, 2]);
  assert.equal(mesh.morphs.length, MORPH_COUNT);
  assert.deepEqual(Array.from(mesh.morphs[JAW].indices), [1, 2]);
  assert.deepEqual(Array.from(mesh.morphs[JAW].deltas), [0, -0.5, 0, Math.fround(0.1), 0, 0]);
  assert.equal(mesh.morphs[5].indices.length, 0);
  assert.deepEqual(mesh.bounds.min, [-1, -1, -0.5]);
  assert.deepEqual(mesh.bounds.max, [1, 1, 0.5]);
  assert.deepEqual(mesh.bounds.center, [0, 0, 0]);
});

test("parseHeadMesh takes a typed array at an unaligned offset", () => {
  const bytes = new Uint8Array(buildMesh(triangle()));
  const holder = new Uint8Array(bytes.length + 3);
  holder.set(bytes, 1);
  const mesh = parseHeadMesh(holder.subarray(1, 1 + bytes.length));
  assert.deepEqual(Array.from(mesh.morphs[JAW].indices), [1, 2]);
  assert.deepEqual(Array.from(mesh.positions), [0, 1, 0, -1, -1, 0.5, 1, -1, -0.5]);
  assert.deepEqual(Array.from(parseHeadMesh(Buffer.from(bytes)).indices), [0, 1, 2]);
});

test("parseHeadMesh refuses truncated and malformed meshes with a clear error", () => {
  const good = buildMesh(triangle());
  for (let cut = 0; cut < good.byteLength; cut += 1) {
    assert.throws(() => parseHeadMesh(good.slice(0, cut)), (err) => err instanceof HeadMeshError
      && /truncated/.test(err.message), `cut at ${cut}`);
  }
  const refuses = (over, pattern) => assert.throws(() => parseHeadMesh(buildMesh(triangle(over))), pattern);
  refuses({ magic: "KFHX" }, /bad magic "KFHX"/);
  refuses({ version: 2 }, /unsupported version 2/);
  refuses({ reserved: [0, 1, 0] }, /bytes 5-7 must be zero/);
  refuses({ indices: [0, 1, 3] }, /indices\[2\] = 3 is out of range \(3 vertices\)/);
  const morphs = triangle().morphs;
  morphs[7] = { indices: [9], deltas: [0, 0, 0] };
  refuses({ morphs }, /morph 7 vertex\[0\] = 9 is out of range/);
  refuses({ morphs: triangle().morphs.slice(0, 51) }, /expected 52 morph targets \(ARKit\), got 51/);
  refuses({ trailing: 4 }, /4 unexpected bytes after the last morph/);
  refuses({ positions: [0, NaN, 0, -1, -1, 0.5, 1, -1, -0.5] }, /positions\[1\] is not a finite number/);
  refuses({ positions: [], normals: [], colors: [], indices: [] }, /no vertices/);
  refuses({ indices: [] }, /no triangles/);
  assert.throws(() => parseHeadMesh("KFHM"), /ArrayBuffer/);
  // A count that would need gigabytes is refused before anything is allocated.
  const huge = new DataView(buildMesh(triangle()));
  huge.setUint32(8, 0xffffffff, true);
  assert.throws(() => parseHeadMesh(huge.buffer), /truncated: 4294967295 positions/);
});

test("blendPositions adds the weighted sparse deltas to the neutral positions", () => {
  const mesh = parseHeadMesh(buildMesh(triangle()));
  const weights = new Float32Array(52);
  const close = (actual, expected) => expected.forEach((e, i) => assert.ok(Math.abs(actual[i] - e) < 1e-6,
    `${i}: ${actual[i]} != ${e}`));
  close(blendPositions(mesh, weights), [0, 1, 0, -1, -1, 0.5, 1, -1, -0.5]);
  weights[JAW] = 0.5;
  weights[0] = 1;
  const out = new Float32Array(9);
  assert.equal(blendPositions(mesh, weights, out), out);
  close(out, [0, 1, 0.25, -1, -1.25, 0.5, 1.05, -1, -0.5]);
  // The output is overwritten, not accumulated; the mesh is untouched.
  weights[0] = 0;
  blendPositions(mesh, weights, out);
  close(out, [0, 1, 0, -1, -1.25, 0.5, 1.05, -1, -0.5]);
  close(mesh.positions, [0, 1, 0, -1, -1, 0.5, 1, -1, -0.5]);
  // Weights act linearly, also past 1; a non-finite weight moves nothing.
  weights[JAW] = 2;
  weights[3] = NaN;
  close(blendPositions(mesh, weights, out), [0, 1, 0, -1, -2, 0.5, 1.2, -1, -0.5]);
  // A short weight vector moves only what it has.
  close(blendPositions(mesh, [1]), [0, 1, 0.25, -1, -1, 0.5, 1, -1, -0.5]);
  assert.throws(() => blendPositions(mesh, weights, new Float32Array(8)), RangeError);
});

test("loadHeadMesh fetches the mesh and reports HTTP failures", async () => {
  const body = buildMesh(triangle());
  const asked = [];
  const ok = async (url) => { asked.push(url); return { ok: true, status: 200, arrayBuffer: async () => body }; };
  assert.equal((await loadHeadMesh(undefined, ok)).vertexCount, 3);
  assert.deepEqual(asked, ["/avatar/head.bin"]);
  assert.equal(HEAD_MESH_URL, "/avatar/head.bin");
  await assert.rejects(loadHeadMesh("/x", async () => ({ ok: false, status: 404 })), /\/x answered HTTP 404/);
});

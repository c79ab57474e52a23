// The avatar's head mesh (GET /avatar/head.bin) and its morph targets, for the caller page's
// canvas (avatar_canvas.js). No DOM, no imports: node's test runner loads it as is.
//
// Binary format, all little-endian:
//
//   offset        size     field
//   0             4        magic "KFHM"
//   4             1        u8 version (1)
//   5             3        zero
//   8             4        u32 N: vertices
//   12            4        u32 M: triangles
//   16            4        u32 K: morph targets (52, the ARKit blendshapes in docs/avatar.md's order)
//   20            12 N     float32 positions, x y z per vertex (head within about [-1, 1],
//                          +Y up, +Z toward the viewer)
//                 12 N     float32 normals (of the neutral face)
//                 4 N      u8 colours, RGBA per vertex
//                 12 M     u32 indices, three per triangle
//   then K times: 4        u32 C: vertices the morph moves
//                 4 C      u32 their indices
//                 12 C     float32 deltas, x y z per listed vertex (at weight 1)
//
// Nothing may follow the last morph. parseHeadMesh refuses anything else with an Error that
// says what is wrong (and where).

export const HEAD_MESH_MAGIC = "KFHM";
export const HEAD_MESH_VERSION = 1;
export const HEAD_MESH_HEADER_BYTES = 20;
export const MORPH_COUNT = 52;
/** Where the page fetches the mesh (no token needed). */
export const HEAD_MESH_URL = "/avatar/head.bin";

export class HeadMeshError extends Error {
  constructor(message) {
    super(`head mesh: ${message}`);
    this.name = "HeadMeshError";
  }
}

function bytesOf(data) {
  if (data instanceof ArrayBuffer) return new DataView(data);
  if (ArrayBuffer.isView(data)) return new DataView(data.buffer, data.byteOffset, data.byteLength);
  throw new HeadMeshError("expected an ArrayBuffer or a typed array");
}

// DataView reads throughout: the sections after the indices need not be aligned for a typed
// array view on every input (a Buffer slice), and the format is little-endian on any host.
function readFloats(view, offset, count, what) {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i += 1) {
    const value = view.getFloat32(offset + 4 * i, true);
    if (!Number.isFinite(value)) throw new HeadMeshError(`${what}[${i}] is not a finite number`);
    out[i] = value;
  }
  return out;
}

function readIndices(view, offset, count, limit, what) {
  const out = new Uint32Array(count);
  for (let i = 0; i < count; i += 1) {
    const value = view.getUint32(offset + 4 * i, true);
    if (value >= limit) {
      throw new HeadMeshError(`${what}[${i}] = ${value} is out of range (${limit} vertices)`);
    }
    out[i] = value;
  }
  return out;
}

/**
 * Parses the head mesh. Returns {version, vertexCount, triangleCount, positions (Float32Array
 * N*3), normals (Float32Array N*3), colors (Uint8Array N*4), indices (Uint32Array M*3),
 * morphs: K × {indices: Uint32Array C, deltas: Float32Array C*3}, bounds: {min, max, center}}.
 * Throws a HeadMeshError on a bad magic or version, truncation, trailing bytes, an index out
 * of range or a non-finite coordinate.
 */
export function parseHeadMesh(data) {
  const view = bytesOf(data);
  const size = view.byteLength;
  const need = (offset, bytes, what) => {
    if (offset + bytes > size) {
      throw new HeadMeshError(`truncated: ${what} needs ${bytes} bytes at offset ${offset}, the file has ${size}`);
    }
  };
  need(0, HEAD_MESH_HEADER_BYTES, "the header");
  const magic = String.fromCharCode(view.getUint8(0), view.getUint8(1), view.getUint8(2), view.getUint8(3));
  if (magic !== HEAD_MESH_MAGIC) throw new HeadMeshError(`bad magic ${JSON.stringify(magic)} (expected "KFHM")`);
  const version = view.getUint8(4);
  if (version !== HEAD_MESH_VERSION) {
    throw new HeadMeshError(`unsupported version ${version} (this page reads version ${HEAD_MESH_VERSION})`);
  }
  if (view.getUint8(5) || view.getUint8(6) || view.getUint8(7)) {
    throw new HeadMeshError("header bytes 5-7 must be zero");
  }
  const n = view.getUint32(8, true);
  const m = view.getUint32(12, true);
  const k = view.getUint32(16, true);
  if (n === 0) throw new HeadMeshError("the mesh has no vertices");
  if (m === 0) throw new HeadMeshError("the mesh has no triangles");
  if (k !== MORPH_COUNT) throw new HeadMeshError(`expected ${MORPH_COUNT} morph targets (ARKit), got ${k}`);

  // Sizes are checked before anything is allocated: a corrupt count cannot ask for gigabytes.
  let offset = HEAD_MESH_HEADER_BYTES;
  need(offset, 12 * n, `${n} positions`);
  const positions = readFloats(view, offset, 3 * n, "positions");
  offset += 12 * n;
  need(offset, 12 * n, `${n} normals`);
  const normals = readFloats(view, offset, 3 * n, "normals");
  offset += 12 * n;
  need(offset, 4 * n, `${n} colours`);
  const colors = new Uint8Array(4 * n);
  for (let i = 0; i < 4 * n; i += 1) colors[i] = view.getUint8(offset + i);
  offset += 4 * n;
  need(offset, 12 * m, `${m} triangles`);
  const indices = readIndices(view, offset, 3 * m, n, "indices");
  offset += 12 * m;

  const morphs = [];
  for (let j = 0; j < k; j += 1) {
    need(offset, 4, `morph ${j}'s count`);
    const c = view.getUint32(offset, true);
    offset += 4;
    need(offset, 16 * c, `morph ${j}'s ${c} vertices`);
    const morphIndices = readIndices(view, offset, c, n, `morph ${j} vertex`);
    offset += 4 * c;
    const deltas = readFloats(view, offset, 3 * c, `morph ${j} deltas`);
    offset += 12 * c;
    morphs.push({ indices: morphIndices, deltas });
  }
  if (offset !== size) throw new HeadMeshError(`${size - offset} unexpected bytes after the last morph`);

  const min = [Infinity, Infinity, Infinity];
  const max = [-Infinity, -Infinity, -Infinity];
  for (let i = 0; i < 3 * n; i += 1) {
    const axis = i % 3;
    if (positions[i] < min[axis]) min[axis] = positions[i];
    if (positions[i] > max[axis]) max[axis] = positions[i];
  }
  const center = min.map((lo, axis) => (lo + max[axis]) / 2);
  return { version, vertexCount: n, triangleCount: m, positions, normals, colors, indices, morphs,
    bounds: { min, max, center } };
}

/**
 * The neutral positions moved by the weighted morphs: out[v] = positions[v] + Σ_k w_k Δ_k[v].
 * `weights` holds one weight per morph (ARKit order; a missing, zero or non-finite weight
 * moves nothing). Writes into `out` (a Float32Array of at least N*3, allocated when omitted)
 * and returns it.
 */
export function blendPositions(mesh, weights, out) {
  const { positions, morphs } = mesh;
  if (out === undefined || out === null) out = new Float32Array(positions.length);
  if (out.length < positions.length) {
    throw new RangeError(`blendPositions: out holds ${out.length} floats, the mesh needs ${positions.length}`);
  }
  out.set(positions);
  const count = Math.min(morphs.length, weights ? weights.length : 0);
  for (let k = 0; k < count; k += 1) {
    const w = weights[k];
    if (w === 0 || !Number.isFinite(w)) continue;
    const { indices, deltas } = morphs[k];
    for (let i = 0; i < indices.length; i += 1) {
      const v = 3 * indices[i];
      const d = 3 * i;
      out[v] += w * deltas[d];
      out[v + 1] += w * deltas[d + 1];
      out[v + 2] += w * deltas[d + 2];
    }
  }
  return out;
}

/** Fetches and parses the head mesh; throws an Error with a readable message on failure. */
export async function loadHeadMesh(url = HEAD_MESH_URL, fetchImpl = globalThis.fetch) {
  const response = await fetchImpl(url, { cache: "default" });
  if (!response.ok) throw new HeadMeshError(`${url} answered HTTP ${response.status}`);
  return parseHeadMesh(await response.arrayBuffer());
}

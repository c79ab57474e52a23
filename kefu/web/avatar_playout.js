// The caller page's digital human, its data (docs/avatar.md): the 60-byte face-weights frames
// of the `kefu-avatar` data channel and a playout buffer that shows them in step with the
// bot's audio. No DOM, no imports; the WebGL canvas that draws the face is avatar_canvas.js.
//
//   decodeWeightsFrame(buffer)   one frame → {speaking, listening, reset, seq, tsMs, weights}
//   WeightsPlayout               frames in, the face to show at a given time out
//   jitterBufferDelayMs(report)  the received audio's jitter-buffer delay from getStats
//   AudioDelayMonitor            that delay, polled (1/s) and smoothed, for the playout
//
// Timing. A frame's timestamp is the bot audio's media time at which it shows. The playout
// maps it to this page's clock with the smallest (arrival - timestamp) seen over the last
// two seconds (the frames' fastest trip) and shows each frame `delay` after that, where
// `delay` follows the audio's own jitter buffer: the voice waits that long before it is
// heard, the face waits as long. A frame that arrives after its time, or older than the
// face on screen, is dropped; frames in between are interpolated, except into a frame with
// the reset flag (the first after a barge-in), which is shown as is.

export const BLENDSHAPES = Object.freeze([
  "eyeBlinkLeft", "eyeLookDownLeft", "eyeLookInLeft", "eyeLookOutLeft", "eyeLookUpLeft",
  "eyeSquintLeft", "eyeWideLeft", "eyeBlinkRight", "eyeLookDownRight", "eyeLookInRight",
  "eyeLookOutRight", "eyeLookUpRight", "eyeSquintRight", "eyeWideRight", "jawForward", "jawLeft",
  "jawRight", "jawOpen", "mouthClose", "mouthFunnel", "mouthPucker", "mouthLeft", "mouthRight",
  "mouthSmileLeft", "mouthSmileRight", "mouthFrownLeft", "mouthFrownRight", "mouthDimpleLeft",
  "mouthDimpleRight", "mouthStretchLeft", "mouthStretchRight", "mouthRollLower", "mouthRollUpper",
  "mouthShrugLower", "mouthShrugUpper", "mouthPressLeft", "mouthPressRight", "mouthLowerDownLeft",
  "mouthLowerDownRight", "mouthUpperUpLeft", "mouthUpperUpRight", "browDownLeft", "browDownRight",
  "browInnerUp", "browOuterUpLeft", "browOuterUpRight", "cheekPuff", "cheekSquintLeft",
  "cheekSquintRight", "noseSneerLeft", "noseSneerRight", "tongueOut",
]);
export const BLENDSHAPE_COUNT = 52;
export const WEIGHTS_FRAME_BYTES = 60;

// --- the wire -------------------------------------------------------------------------------

export class WeightsFrameError extends Error {
  constructor(message, reason) {
    super(message);
    this.name = "WeightsFrameError";
    this.reason = reason; // length | magic | version | flags (as the server's decoder)
  }
}

const FLAG_SPEAKING = 0x01;
const FLAG_LISTENING = 0x02;
const FLAG_RESET = 0x04;

/** Decodes one 60-byte weights frame (docs/avatar.md, "Wire format"); strict. */
export function decodeWeightsFrame(data) {
  let view;
  if (data instanceof ArrayBuffer) view = new DataView(data);
  else if (ArrayBuffer.isView(data)) view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  else throw new WeightsFrameError("a weights frame must be binary", "length");
  if (view.byteLength !== WEIGHTS_FRAME_BYTES) {
    throw new WeightsFrameError(`a weights frame has ${WEIGHTS_FRAME_BYTES} bytes, got ${view.byteLength}`, "length");
  }
  const head = view.getUint8(0);
  if (head >> 4 !== 0xa) throw new WeightsFrameError(`not a weights frame (magic 0x${(head >> 4).toString(16)})`, "magic");
  if ((head & 0x0f) !== 1) throw new WeightsFrameError(`unsupported weights frame version ${head & 0x0f}`, "version");
  const flags = view.getUint8(1);
  if (flags & ~(FLAG_SPEAKING | FLAG_LISTENING | FLAG_RESET) & 0xff) {
    throw new WeightsFrameError(`reserved flag bits set (0x${flags.toString(16)})`, "flags");
  }
  const weights = new Float32Array(BLENDSHAPE_COUNT);
  for (let i = 0; i < BLENDSHAPE_COUNT; i += 1) weights[i] = view.getUint8(8 + i) / 255;
  return {
    speaking: Boolean(flags & FLAG_SPEAKING),
    listening: Boolean(flags & FLAG_LISTENING),
    reset: Boolean(flags & FLAG_RESET),
    seq: view.getUint16(2, false),
    tsMs: view.getUint32(4, false),
    weights,
  };
}

// --- playout --------------------------------------------------------------------------------

export const DEFAULT_PLAYOUT_DELAY_MS = 60;
const MAX_PLAYOUT_DELAY_MS = 1000;
/** The local clock (ms) of the playout and of the canvas that asks it for faces. */
export const defaultNow = () => (globalThis.performance ? globalThis.performance.now() : Date.now());

/**
 * Frames in (push, at their arrival), the face to show out (frameAt). Times are
 * milliseconds on one local clock (performance.now() by default; tests pass their own).
 *
 * Options: delayMs (initial playout delay, setDelay changes it), windowMs (how long the
 * fastest trip is remembered, 2 s), resyncMs (an (arrival - timestamp) this far from the
 * remembered one means the sender's clock jumped: start over, 1 s), maxInterpolateMs (frames
 * further apart are not interpolated, 150 ms), maxQueue (frames held at most, 120).
 */
export class WeightsPlayout {
  constructor({ delayMs = DEFAULT_PLAYOUT_DELAY_MS, now = defaultNow, windowMs = 2000, resyncMs = 1000,
                maxInterpolateMs = 150, maxQueue = 120 } = {}) {
    this.now = now;
    this.windowMs = windowMs;
    this.resyncMs = resyncMs;
    this.maxInterpolateMs = maxInterpolateMs;
    this.maxQueue = maxQueue;
    this._delay = DEFAULT_PLAYOUT_DELAY_MS;
    this.setDelay(delayMs);
    this.counters = { received: 0, shown: 0, skipped: 0, late: 0, stale: 0, resyncs: 0 };
    this._out = new Float32Array(BLENDSHAPE_COUNT);
    this.clear();
  }

  get delayMs() { return this._delay; }

  setDelay(ms) {
    if (Number.isFinite(ms)) this._delay = Math.min(MAX_PLAYOUT_DELAY_MS, Math.max(0, ms));
  }

  /** Forgets every frame and the clock mapping (a new call, or the avatar mode changed). */
  clear() {
    this._queue = []; // {ts (unwrapped), frame}, ts ascending
    this._current = null;
    this._trips = []; // {at, offset}: arrival - ts of recent frames
    this._base = null;
    this._refRaw = null;
    this._refTs = 0;
  }

  /** Adds a decoded frame that arrived at `arrival`: "queued", "late" or "stale" (dropped). */
  push(frame, arrival = this.now()) {
    this.counters.received += 1;
    // The u32 timestamp wraps (after 49 days); unwrap it against the previous one.
    const raw = frame.tsMs >>> 0;
    const ts = this._refRaw === null ? raw : this._refTs + ((raw - this._refRaw) | 0);
    this._refRaw = raw;
    this._refTs = ts;
    const offset = arrival - ts;
    if (this._base !== null && Math.abs(offset - this._base) > this.resyncMs) {
      // The sender's clock jumped (a new bot audio track) or the path stalled for seconds.
      this.counters.resyncs += 1;
      this.clear();
      this._refRaw = raw;
      this._refTs = ts;
    }
    this._trips.push({ at: arrival, offset });
    while (this._trips.length > 1 && this._trips[0].at < arrival - this.windowMs) this._trips.shift();
    this._base = Math.min(...this._trips.map((t) => t.offset));

    if (this._current && ts <= this._current.ts) {
      this.counters.stale += 1;
      return "stale";
    }
    let i = this._queue.length;
    while (i > 0 && this._queue[i - 1].ts > ts) i -= 1;
    if (i > 0 && this._queue[i - 1].ts === ts) {
      this.counters.stale += 1; // a duplicate
      return "stale";
    }
    if (ts + this._base + this._delay < arrival) {
      this.counters.late += 1;
      return "late";
    }
    this._queue.splice(i, 0, { ts, frame });
    if (this._queue.length > this.maxQueue) {
      this._queue.shift();
      this.counters.skipped += 1;
    }
    return "queued";
  }

  /** When the frame with (unwrapped) timestamp `ts` shows, on the local clock. */
  dueAt(ts) {
    return this._base === null ? Infinity : ts + this._base + this._delay;
  }

  /**
   * The face at `now`: {weights (Float32Array(52), reused: copy to keep), frame (the frame
   * on screen), interpolated} or null before the first frame is due.
   */
  frameAt(now = this.now()) {
    let advanced = false;
    while (this._queue.length && this.dueAt(this._queue[0].ts) <= now) {
      if (advanced) this.counters.skipped += 1;
      this._current = this._queue.shift();
      advanced = true;
    }
    if (advanced) this.counters.shown += 1;
    const current = this._current;
    if (!current) return null;
    const next = this._queue[0];
    const out = this._out;
    const gap = next ? next.ts - current.ts : 0;
    if (next && !next.frame.reset && gap > 0 && gap <= this.maxInterpolateMs) {
      const a = Math.min(1, Math.max(0, (now - this.dueAt(current.ts)) / gap));
      const from = current.frame.weights;
      const to = next.frame.weights;
      for (let i = 0; i < BLENDSHAPE_COUNT; i += 1) out[i] = from[i] + a * (to[i] - from[i]);
      return { weights: out, frame: current.frame, interpolated: a > 0 };
    }
    out.set(current.frame.weights);
    return { weights: out, frame: current.frame, interpolated: false };
  }

  /** Frames waiting to be shown. */
  get queued() { return this._queue.length; }
}

// --- the audio's playout delay --------------------------------------------------------------

/**
 * The received audio's jitter-buffer delay in ms from a getStats() report: over the
 * inbound-rtp audio streams, jitterBufferDelay / jitterBufferEmittedCount since `previous`
 * (the totals this function returned last time), or since the start when there is no usable
 * previous. Returns {delayMs (null when nothing was played yet), totals}.
 */
export function jitterBufferDelayMs(report, previous = null) {
  let delay = 0;
  let count = 0;
  if (report && typeof report.forEach === "function") {
    report.forEach((s) => {
      if (s && s.type === "inbound-rtp" && s.kind === "audio"
          && Number.isFinite(s.jitterBufferDelay) && Number.isFinite(s.jitterBufferEmittedCount)) {
        delay += s.jitterBufferDelay;
        count += s.jitterBufferEmittedCount;
      }
    });
  }
  const totals = { delay, count };
  if (previous && count > previous.count && delay >= previous.delay) {
    return { delayMs: (1000 * (delay - previous.delay)) / (count - previous.count), totals };
  }
  if (previous && count === previous.count && count > 0) return { delayMs: null, totals }; // nothing new
  return { delayMs: count > 0 ? (1000 * delay) / count : null, totals };
}

/**
 * Polls `getStats()` (a function returning a report, or a promise of one, or null) every
 * `intervalMs` and calls `onDelay(ms)` with the audio's smoothed playout delay plus
 * `extraMs`. Errors are ignored: the last delay stays.
 */
export class AudioDelayMonitor {
  constructor(getStats, onDelay, { intervalMs = 1000, extraMs = 0, smoothing = 0.5,
                                   setIntervalFn = (fn, ms) => setInterval(fn, ms),
                                   clearIntervalFn = (id) => clearInterval(id) } = {}) {
    this.getStats = getStats;
    this.onDelay = onDelay;
    this.intervalMs = intervalMs;
    this.extraMs = extraMs;
    this.smoothing = smoothing;
    this._setInterval = setIntervalFn;
    this._clearInterval = clearIntervalFn;
    this._timer = null;
    this._totals = null;
    this.delayMs = null;
  }

  start() {
    if (this._timer === null) this._timer = this._setInterval(() => { this.poll(); }, this.intervalMs);
  }

  stop() {
    if (this._timer !== null) this._clearInterval(this._timer);
    this._timer = null;
  }

  async poll() {
    let report;
    try {
      report = await this.getStats();
    } catch {
      return this.delayMs;
    }
    if (!report) return this.delayMs;
    const { delayMs, totals } = jitterBufferDelayMs(report, this._totals);
    this._totals = totals;
    if (delayMs === null || !Number.isFinite(delayMs)) return this.delayMs;
    this.delayMs = this.delayMs === null ? delayMs : this.delayMs + this.smoothing * (delayMs - this.delayMs);
    try {
      this.onDelay(this.delayMs + this.extraMs);
    } catch { /* the listener's problem, not the poll's */ }
    return this.delayMs;
  }
}

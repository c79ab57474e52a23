// The caller page's avatar data (kefu/web/avatar_playout.js): the weights frame of
// docs/avatar.md, the playout buffer on a fake clock and the audio-delay poll.
// `node --test tests/web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { JAW, frame, jaw, loadWebModule, read } from "./avatar_support.mjs";

const { AudioDelayMonitor, BLENDSHAPES, WeightsFrameError, WeightsPlayout, decodeWeightsFrame,
  jitterBufferDelayMs } = await loadWebModule("avatar_playout.js");

// --- the weights frame ------------------------------------------------------------------------

// The example dump of docs/avatar.md, read from the document itself.
function docDump() {
  const doc = read("../../docs/avatar.md");
  const block = doc.slice(doc.indexOf("Example: sequence 258")).split("```")[1];
  const bytes = [];
  for (const line of block.trim().split("\n")) bytes.push(...line.trim().split(/\s+/).slice(1).map((h) => parseInt(h, 16)));
  return new Uint8Array(bytes);
}

test("decodeWeightsFrame reads docs/avatar.md's example frame", () => {
  const dump = docDump();
  assert.equal(dump.length, 60);
  const frame = decodeWeightsFrame(dump.buffer);
  assert.equal(frame.seq, 258);
  assert.equal(frame.tsMs, 1234567);
  assert.equal(frame.speaking, true);
  assert.equal(frame.listening, false);
  assert.equal(frame.reset, false);
  assert.ok(frame.weights instanceof Float32Array);
  assert.equal(frame.weights.length, 52);
  const expected = new Float32Array(52);
  expected[BLENDSHAPES.indexOf("eyeBlinkLeft")] = 1;
  expected[BLENDSHAPES.indexOf("eyeBlinkRight")] = 1;
  expected[BLENDSHAPES.indexOf("jawOpen")] = 166 / 255;
  expected[BLENDSHAPES.indexOf("mouthSmileLeft")] = 51 / 255;
  expected[BLENDSHAPES.indexOf("mouthSmileRight")] = 51 / 255;
  expected[BLENDSHAPES.indexOf("mouthLowerDownLeft")] = 102 / 255;
  expected[BLENDSHAPES.indexOf("mouthLowerDownRight")] = 102 / 255;
  assert.deepEqual(Array.from(frame.weights), Array.from(expected));
  // Within the quantisation step of the values the document names.
  assert.ok(Math.abs(frame.weights[JAW] - 0.65) <= 1 / 510);
  assert.ok(Math.abs(frame.weights[BLENDSHAPES.indexOf("mouthSmileLeft")] - 0.2) <= 1 / 510);
  // A view at an offset (a Buffer slice) decodes the same.
  const holder = new Uint8Array(61);
  holder.set(dump, 1);
  assert.deepEqual(decodeWeightsFrame(holder.subarray(1)), frame);
});

test("decodeWeightsFrame is strict", () => {
  const dump = docDump();
  const variant = (offset, value) => { const b = dump.slice(); b[offset] = value; return b.buffer; };
  const reason = (data, why) => assert.throws(() => decodeWeightsFrame(data),
    (err) => err instanceof WeightsFrameError && err.reason === why, why);
  reason(dump.slice(0, 59).buffer, "length");
  reason(new Uint8Array(61).fill(0xa1).buffer, "length");
  reason(new ArrayBuffer(0), "length");
  reason("a1", "length");
  reason(variant(0, 0xb1), "magic");
  reason(variant(0, 0x01), "magic");
  reason(variant(0, 0xa2), "version");
  reason(variant(0, 0xa0), "version");
  reason(variant(1, 0x08), "flags");
  reason(variant(1, 0x81), "flags");
  const flags = decodeWeightsFrame(variant(1, 0x06));
  assert.deepEqual([flags.speaking, flags.listening, flags.reset], [false, true, true]);
  const wrapped = new Uint8Array(dump);
  wrapped.set([0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 2);
  const last = decodeWeightsFrame(wrapped.buffer);
  assert.equal(last.seq, 65535);
  assert.equal(last.tsMs, 2 ** 32 - 1);
});

// --- the playout ------------------------------------------------------------------------------

test("frames show at their arrival plus the delay, in timestamp order", () => {
  let clock = 0;
  const playout = new WeightsPlayout({ delayMs: 80, now: () => clock, maxInterpolateMs: 0 });
  // The sender's clock is 10 000 ms behind ours; frames every 33 ms, each level = its index.
  assert.equal(playout.push(frame(500, 0.0), 10500), "queued");
  assert.equal(playout.frameAt(10579), null);
  assert.equal(jaw(playout.frameAt(10580)), 0);
  // The next two arrive swapped (the channel is unordered): still shown in ts order.
  assert.equal(playout.push(frame(566, 0.2), 10570), "queued");
  assert.equal(playout.push(frame(533, 0.1), 10575), "queued");
  assert.equal(jaw(playout.frameAt(10612)), 0);
  assert.ok(playout.frameAt(10612).interpolated === false);
  assert.equal(jaw(playout.frameAt(10613)), 0.1); // 533 + 10000 + 80
  assert.equal(jaw(playout.frameAt(10646)), 0.2);
  assert.equal(playout.frameAt(10646).frame.tsMs, 566);
  // No more frames: the last face stays.
  assert.equal(jaw(playout.frameAt(11000)), 0.2);
  assert.equal(playout.counters.shown, 3);
  // Default clock: `now` is used when no time is given.
  clock = 11000;
  assert.equal(playout.push(frame(1000, 0.5)), "queued");
  assert.equal(jaw(playout.frameAt()), 0.2);
  clock = 11080;
  assert.equal(jaw(playout.frameAt()), 0.5);
});

test("frames in between are interpolated; into a reset frame the face snaps", () => {
  const playout = new WeightsPlayout({ delayMs: 50 });
  playout.push(frame(0, 0), 1000);
  playout.push(frame(40, 0.4), 1040);
  assert.equal(jaw(playout.frameAt(1050)), 0);
  const half = playout.frameAt(1070);
  assert.equal(jaw(half), 0.2);
  assert.equal(half.interpolated, true);
  assert.equal(half.frame.tsMs, 0); // the frame on screen is still the first
  playout.push(frame(80, 0, { reset: true }), 1080);
  assert.equal(jaw(playout.frameAt(1090)), 0.4);
  assert.equal(jaw(playout.frameAt(1110)), 0.4); // held, not eased towards the reset frame
  assert.equal(playout.frameAt(1110).interpolated, false);
  assert.equal(jaw(playout.frameAt(1130)), 0); // then shown as is
  assert.equal(playout.frameAt(1130).frame.reset, true);
  // Frames too far apart (lost ones) are not interpolated either.
  playout.push(frame(400, 1), 1400);
  assert.equal(jaw(playout.frameAt(1420)), 0);
  assert.equal(jaw(playout.frameAt(1450)), 1);
});

test("late, stale and duplicate frames are dropped", () => {
  const playout = new WeightsPlayout({ delayMs: 60 });
  playout.push(frame(0, 0), 1000);
  // Arrives 61 ms later than the fastest trip: after its time, dropped.
  assert.equal(playout.push(frame(33, 0.1), 1033 + 61), "late");
  assert.equal(playout.push(frame(66, 0.2), 1066 + 60), "queued"); // exactly on time
  assert.equal(playout.push(frame(66, 0.2), 1127), "stale"); // a duplicate
  assert.equal(jaw(playout.frameAt(1126)), 0.2);
  // Older than (or as old as) the face on screen.
  assert.equal(playout.push(frame(50, 0.9), 1127), "stale");
  assert.equal(playout.push(frame(66, 0.9), 1127), "stale");
  assert.deepEqual({ late: playout.counters.late, stale: playout.counters.stale, received: playout.counters.received },
    { late: 1, stale: 3, received: 6 });
  // Several frames due at once: the newest shows, the others count as skipped.
  playout.push(frame(100, 0.3), 1101);
  playout.push(frame(133, 0.4), 1134);
  assert.equal(jaw(playout.frameAt(1300)), 0.4);
  assert.equal(playout.counters.skipped, 2); // and frame 0 under frame 66 before
});

test("the playout follows a faster trip, the delay, a clock jump and a timestamp wrap", () => {
  const playout = new WeightsPlayout({ delayMs: 100 });
  playout.push(frame(0, 0), 1050);
  playout.push(frame(100, 0.1), 1100); // 50 ms faster than the first: the mapping follows
  assert.equal(playout.dueAt(100), 1200);
  playout.setDelay(30);
  assert.equal(playout.delayMs, 30);
  assert.equal(jaw(playout.frameAt(1130)), 0.1);
  playout.setDelay(NaN);
  assert.equal(playout.delayMs, 30);
  playout.setDelay(5000);
  assert.equal(playout.delayMs, 1000);
  playout.setDelay(-1);
  assert.equal(playout.delayMs, 0);
  playout.setDelay(30);
  // The sender's clock jumps (a new bot track): start over rather than wait or drop.
  assert.equal(playout.push(frame(900000, 0.7), 1200), "queued");
  assert.equal(playout.counters.resyncs, 1);
  assert.equal(jaw(playout.frameAt(1230)), 0.7);
  // The u32 timestamp wraps: the next frame is still the next.
  const wrap = new WeightsPlayout({ delayMs: 20 });
  wrap.push(frame(2 ** 32 - 10, 0.1), 5000);
  assert.equal(wrap.push(frame(23, 0.2), 5033), "queued");
  assert.equal(wrap.counters.resyncs, 0);
  assert.equal(jaw(wrap.frameAt(5053)), 0.2);
  // The fastest trip is remembered for windowMs only.
  const slow = new WeightsPlayout({ delayMs: 20, windowMs: 1000 });
  slow.push(frame(0), 1000);
  assert.equal(slow.push(frame(100), 1100 + 50), "late"); // 50 ms slower than the first
  assert.equal(slow.push(frame(1200), 2200 + 50), "queued"); // the first is forgotten
  slow.clear();
  assert.equal(slow.queued, 0);
  assert.equal(slow.frameAt(5000), null);
});

// --- the audio's delay ------------------------------------------------------------------------

function report(...entries) {
  return new Map(entries.map((e, i) => [String(i), e]));
}
const audioIn = (delay, count) => ({ type: "inbound-rtp", kind: "audio", jitterBufferDelay: delay,
  jitterBufferEmittedCount: count });

test("the jitter-buffer delay comes from the audio's inbound-rtp stats", () => {
  const first = jitterBufferDelayMs(report(audioIn(4800, 96000),
    { type: "inbound-rtp", kind: "video", jitterBufferDelay: 99, jitterBufferEmittedCount: 1 },
    { type: "outbound-rtp", kind: "audio" }));
  assert.equal(first.delayMs, 50);
  // Since the previous poll: 48 000 samples held 0.08 s each.
  const second = jitterBufferDelayMs(report(audioIn(4800 + 48000 * 0.08, 144000)), first.totals);
  assert.ok(Math.abs(second.delayMs - 80) < 1e-9, String(second.delayMs));
  assert.equal(jitterBufferDelayMs(report(audioIn(8640, 144000)), second.totals).delayMs, null); // nothing new
  // The streams changed (a new track, counters restarted): the whole average again.
  assert.equal(jitterBufferDelayMs(report(audioIn(30, 1000)), second.totals).delayMs, 30);
  assert.equal(jitterBufferDelayMs(report()).delayMs, null);
  assert.equal(jitterBufferDelayMs(null).delayMs, null);
  // Two audio streams add up.
  assert.equal(jitterBufferDelayMs(report(audioIn(1000, 20000), audioIn(3000, 20000))).delayMs, 100);
});

test("the delay monitor polls once a second, smooths and survives failures", async () => {
  const timers = [];
  const cleared = [];
  const delays = [];
  const reports = [report(audioIn(4800, 96000)), null, report(audioIn(4800 + 0.09 * 48000, 144000))];
  let fail = false;
  const monitor = new AudioDelayMonitor(async () => {
    if (fail) throw new Error("closed");
    return reports.shift();
  }, (ms) => delays.push(ms), {
    extraMs: 5,
    setIntervalFn: (fn, ms) => { timers.push({ fn, ms }); return 7; },
    clearIntervalFn: (id) => cleared.push(id),
  });
  monitor.start();
  monitor.start();
  assert.equal(timers.length, 1);
  assert.equal(timers[0].ms, 1000);
  await timers[0].fn();
  await monitor.poll();
  assert.equal(await monitor.poll(), 70); // halfway from 50 towards 90
  fail = true;
  assert.equal(await monitor.poll(), 70);
  assert.deepEqual(delays, [55, 75]);
  monitor.stop();
  monitor.stop();
  assert.deepEqual(cleared, [7]);
  // A monitor whose getStats has nothing (no peer connection yet) never calls back.
  const idle = new AudioDelayMonitor(() => null, () => assert.fail("no delay"));
  assert.equal(await idle.poll(), null);
});

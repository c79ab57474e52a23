// Drives Debian's Chromium through playwright-core for tests/browser and tests/turn.
//
//   node tests/browser/driver.mjs SPEC.json   -> one JSON line on stdout
//
// SPEC: {
//   "chromium": "/usr/bin/chromium",
//   "callers": [{"url": "...", "wav": "fake mic .wav", "fakeUi": true, "profile": "dir"}],
//   "until": ["in-call"],          // states that count as "connected" (error/ended stop too)
//   "holdMs": 4000,                // time in call once every caller is connected
//   "minPackets": 0,               // stop holding early once every caller's inbound audio has
//   "minStreams": 1,               //   this many packets on at least this many streams
//   "timeoutMs": 15000,            // per caller, to reach a state in "until"
//   "record": false,               // tap the page's remote audio (see TAP below)
//   "videoMs": 0,                  // at the end, count inbound video frames decoded over
//                                  //   this long: "videoFps" in the result
//   "screenshot": "out.png"        // at the end, a PNG of each caller's #media box
//                                  //   ("out.png", then "out-1.png", ...): "screenshot"
// }
// Callers start one after the other (each waits for the previous one to be connected), so
// the first one creates the room. Result: {"callers": [{state, error, errorText, statusText,
// stats, events, transcript, connectMs, heard}], "ok": bool}; ``heard`` (with "record") is
// one entry per remote audio track the page played: {track, rate, frames, pcm}, ``pcm`` the
// base64 of mono little-endian int16 at ``rate`` (48 kHz), from the moment the page attached
// the track to its <audio> element. Never `npx playwright install`:
// the browser is Debian's.
//
// Other drivers (agent_driver.mjs) import flags, installTap, launch and dumpTap from here;
// main() runs only when this file is the script node was started with.

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

let spec = {};

export function flags(caller) {
  const args = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--use-fake-device-for-media-stream", "--allow-loopback-in-peer-connection",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--disable-features=WebRtcHideLocalIpsWithMdns",
    "--autoplay-policy=no-user-gesture-required",
  ];
  if (caller.fakeUi !== false) args.push("--use-fake-ui-for-media-stream");
  if (caller.wav) args.push(`--use-file-for-fake-audio-capture=${caller.wav}`);
  return args;
}

// The tap: an init script, so it is in place before the page's own scripts run. It changes
// nothing the page does: it watches the DOM for the <audio> elements the page creates for
// remote tracks and, for each audio track in one's srcObject, feeds the same track into its
// own AudioContext (48 kHz) -> AudioWorklet, which copies every 128-frame render quantum
// (mono: the channels averaged) into Float32 chunks posted to the page. The worklet runs on
// the audio thread, so a busy main thread delays the chunks but does not drop any; the worklet's
// output goes to the destination through a zero gain, so the tap plays nothing itself.
export function installTap() {
  const RATE = 48000;
  const CHUNK = 4800; // frames per message (100 ms)
  const WORKLET = `
    class KefuTap extends AudioWorkletProcessor {
      constructor() { super(); this.buf = new Float32Array(${CHUNK}); this.n = 0; }
      process(inputs) {
        const chans = inputs[0] || [];
        for (let i = 0; i < 128; i++) {
          let v = 0;
          for (const c of chans) v += c[i] || 0;
          this.buf[this.n++] = chans.length ? v / chans.length : 0;
          if (this.n === this.buf.length) {
            this.port.postMessage(this.buf, [this.buf.buffer]);
            this.buf = new Float32Array(${CHUNK});
            this.n = 0;
          }
        }
        return true;
      }
    }
    registerProcessor("kefu-tap", KefuTap);`;
  const taps = [];
  const seen = new Set();
  let ready = null;
  function context() {
    if (!ready) {
      const ctx = new AudioContext({ sampleRate: RATE });
      const url = URL.createObjectURL(new Blob([WORKLET], { type: "text/javascript" }));
      ready = ctx.audioWorklet.addModule(url).then(() => ctx.resume()).then(() => ctx);
    }
    return ready;
  }
  async function tap(track) {
    if (track.kind !== "audio" || seen.has(track.id)) return;
    seen.add(track.id);
    const rec = { track: track.id, chunks: [], error: null };
    taps.push(rec);
    try {
      const ctx = await context();
      const source = ctx.createMediaStreamSource(new MediaStream([track]));
      const node = new AudioWorkletNode(ctx, "kefu-tap", { numberOfOutputs: 1 });
      node.port.onmessage = (e) => rec.chunks.push(e.data);
      const mute = ctx.createGain();
      mute.gain.value = 0;
      source.connect(node).connect(mute).connect(ctx.destination);
      rec.nodes = [source, node, mute]; // keep them alive
    } catch (err) {
      rec.error = String(err);
    }
  }
  function scan(node) {
    if (!(node instanceof Element)) return;
    const found = node.matches("audio") ? [node] : Array.from(node.querySelectorAll("audio"));
    for (const el of found) {
      if (el.srcObject instanceof MediaStream) el.srcObject.getAudioTracks().forEach(tap);
    }
  }
  new MutationObserver((records) => {
    for (const r of records) r.addedNodes.forEach(scan);
  }).observe(document, { childList: true, subtree: true });
  window.__kefuTap = {
    dump() {
      return taps.map((rec) => {
        const frames = rec.chunks.reduce((n, c) => n + c.length, 0);
        const bytes = new Uint8Array(frames * 2);
        const view = new DataView(bytes.buffer);
        let at = 0;
        for (const c of rec.chunks) {
          for (const v of c) {
            view.setInt16(at, Math.max(-32768, Math.min(32767, Math.round(v * 32768))), true);
            at += 2;
          }
        }
        let bin = "";
        for (let i = 0; i < bytes.length; i += 0x8000) {
          bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
        }
        return { track: rec.track, rate: RATE, frames, error: rec.error, pcm: btoa(bin) };
      });
    },
  };
}

/** One Chromium (a persistent context in ``caller.profile``) with the caller's fake
 *  microphone; ``record`` installs the tap in every page it opens. */
export async function launch(caller, { executable = spec.chromium, record = spec.record } = {}) {
  const context = await chromium.launchPersistentContext(caller.profile, {
    executablePath: executable || "/usr/bin/chromium",
    headless: true,
    args: flags(caller),
    ignoreDefaultArgs: ["--mute-audio"],
    // No permission granted: with fakeUi false, getUserMedia is refused like a user's "Block".
    permissions: caller.fakeUi === false ? [] : undefined,
  });
  if (record) await context.addInitScript(installTap);
  const page = context.pages()[0] || (await context.newPage());
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  return { context, page, logs };
}

/** What the tap recorded so far on ``page`` (see ``heard`` above). */
export async function dumpTap(page) {
  return page.evaluate(() => window.__kefuTap.dump());
}

async function waitConnected(run, until, timeoutMs) {
  const started = Date.now();
  await run.page.goto(run.caller.url);
  try {
    await run.page.waitForFunction(
      (states) => window.kefu && (states.includes(window.kefu.state) || window.kefu.error
        || window.kefu.state === "ended"),
      until, { timeout: timeoutMs, polling: 50 });
  } catch (err) {
    run.timeout = `no state in ${JSON.stringify(until)} within ${timeoutMs} ms`;
  }
  run.connectMs = Date.now() - started;
}

async function snapshot(run) {
  return run.page.evaluate(async () => ({
    state: window.kefu.state,
    error: window.kefu.error,
    errorText: document.getElementById("error").hidden ? "" : document.getElementById("error").textContent,
    statusText: document.getElementById("status").textContent,
    stats: await window.kefu.stats(),
    events: window.kefu.events,
    transcript: Array.from(document.querySelectorAll("#transcript li"), (li) => li.textContent),
    avatar: window.kefu.avatar ? JSON.parse(JSON.stringify(window.kefu.avatar)) : null,
  }));
}

// Inbound video frames decoded per second over ``ms``, from getStats (null: no video stream).
async function videoRate(run, ms) {
  const decoded = async () => {
    const snap = await snapshot(run);
    const video = snap.stats ? snap.stats.inbound.filter((s) => s.kind === "video") : [];
    return video.length ? video.reduce((n, s) => n + (s.framesDecoded || 0), 0) : null;
  };
  const before = await decoded();
  const started = Date.now();
  await new Promise((r) => setTimeout(r, ms));
  const after = await decoded();
  if (before === null || after === null) return null;
  return (after - before) / ((Date.now() - started) / 1000);
}

function enoughAudio(snap) {
  if (!snap.stats) return false;
  const streams = snap.stats.inbound.filter((s) => s.kind === "audio"
    && s.packetsReceived >= (spec.minPackets || 0) && s.totalAudioEnergy > 0);
  return streams.length >= (spec.minStreams || 1);
}

async function main() {
  const until = spec.until || ["in-call"];
  const runs = [];
  try {
    for (const caller of spec.callers) {
      const run = { caller, ...(await launch(caller)) };
      runs.push(run);
      await waitConnected(run, until, spec.timeoutMs || 15000);
    }
    const deadline = Date.now() + (spec.holdMs || 0);
    while (Date.now() < deadline) {
      const snaps = await Promise.all(runs.map(snapshot));
      if (spec.minPackets && snaps.every(enoughAudio)) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const results = [];
    for (const [index, run] of runs.entries()) {
      const heard = spec.record ? await dumpTap(run.page) : null;
      const videoFps = spec.videoMs ? await videoRate(run, spec.videoMs) : null;
      let screenshot = null;
      if (spec.screenshot) {
        screenshot = index ? spec.screenshot.replace(/\.png$/, `-${index}.png`) : spec.screenshot;
        await run.page.locator("#media").screenshot({ path: screenshot });
      }
      results.push({ ...(await snapshot(run)), connectMs: run.connectMs, timeout: run.timeout || null,
        logs: run.logs.slice(-20), heard, videoFps, screenshot });
    }
    process.stdout.write(JSON.stringify({ ok: true, callers: results }) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err) }) + "\n");
    process.exitCode = 1;
  } finally {
    await Promise.all(runs.map((r) => r.context.close().catch(() => {})));
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
  await main();
}

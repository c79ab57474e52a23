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
//   "timeoutMs": 15000             // per caller, to reach a state in "until"
// }
// Callers start one after the other (each waits for the previous one to be connected), so
// the first one creates the room. Result: {"callers": [{state, error, errorText, statusText,
// stats, events, transcript, connectMs}], "ok": bool}. Never `npx playwright install`:
// the browser is Debian's.

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));

function flags(caller) {
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

async function launch(caller) {
  const context = await chromium.launchPersistentContext(caller.profile, {
    executablePath: spec.chromium || "/usr/bin/chromium",
    headless: true,
    args: flags(caller),
    ignoreDefaultArgs: ["--mute-audio"],
    // No permission granted: with fakeUi false, getUserMedia is refused like a user's "Block".
    permissions: caller.fakeUi === false ? [] : undefined,
  });
  const page = context.pages()[0] || (await context.newPage());
  const logs = [];
  page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
  return { context, page, logs };
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
  }));
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
    for (const run of runs) {
      results.push({ ...(await snapshot(run)), connectMs: run.connectMs, timeout: run.timeout || null,
        logs: run.logs.slice(-20) });
    }
    process.stdout.write(JSON.stringify({ ok: true, callers: results }) + "\n");
  } catch (err) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err) }) + "\n");
    process.exitCode = 1;
  } finally {
    await Promise.all(runs.map((r) => r.context.close().catch(() => {})));
  }
}

await main();

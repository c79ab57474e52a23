// Drives the agent workbench (/agent) in Debian's Chromium for
// tests/browser/test_agent_workbench.py: one agent takes a live call over mid-answer and hands
// it back; optionally a second agent, in another page, tries to take the same call.
//
//   node tests/browser/agent_driver.mjs SPEC.json   -> JSON lines on stdout
//
// SPEC: {
//   "chromium": "/usr/bin/chromium",
//   "agent": {"url": ".../agent?token=...", "wav": "fake mic .wav", "profile": "dir"},
//   "rival": {"url": ".../agent?token=..."} | null,  // a second page in the same browser
//   "takeoverDelayMs": 1000,  // after the bot's first answer (transcript.final, turn_id > 0)
//   "handbackS": 17,          // hand back this long after the call was answered
//   "timeoutMs": 90000        // the whole run
// }
// Prints {"ready": true} once every page is signed in with live updates (start the call
// then), and finally {"ok", "callId", "takeover", "rival", "handback", "timings", "events",
// "transcript", "heard", ...}: times are UNIX seconds on this host's clock (the pages run
// here), so they compare with tshark's arrival times. The agent page's remote audio is
// tapped from the moment it plays (driver.mjs's tap); the call must end (the caller hangs
// up) before the result is printed.

import { readFileSync } from "node:fs";
import { dumpTap, launch } from "./driver.mjs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const deadline = Date.now() + (spec.timeoutMs || 90000);
const left = () => Math.max(1000, deadline - Date.now());
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => Date.now() / 1000;
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

async function signedIn(page, url) {
  await page.goto(url);
  await page.waitForFunction(
    () => window.kefuAgent && window.kefuAgent.state === "ready" && window.kefuAgent.feed === "live",
    null, { timeout: left(), polling: 100 });
}

function view(page) {
  return page.evaluate(() => ({
    state: window.kefuAgent.state,
    errors: window.kefuAgent.errors,
    media: window.kefuAgent.media,
    statusText: document.getElementById("status").textContent,
    errorText: document.getElementById("error").hidden ? "" : document.getElementById("error").textContent,
    mediaText: document.getElementById("media-status").textContent,
  }));
}

async function main() {
  const run = await launch(spec.agent, { executable: spec.chromium, record: true });
  const result = { ok: false };
  const step = (name) => { result.step = name; };
  let rival = null;
  try {
    const page = run.page;
    step("sign in");
    await signedIn(page, spec.agent.url);
    if (spec.rival) {
      rival = await run.context.newPage();
      rival.on("pageerror", (e) => run.logs.push(`rival pageerror: ${e.message}`));
      await signedIn(rival, spec.rival.url);
    }
    emit({ ready: true });

    step("wait for the call");
    const handle = await page.waitForFunction(
      () => { const c = window.kefuAgent.calls.find((x) => !x.ended); return c ? c.call_id : null; },
      null, { timeout: left(), polling: 100 });
    const callId = await handle.jsonValue();
    result.callId = callId;
    await page.evaluate((id) => window.kefuAgent.select(id), callId);

    step("wait for the bot's answer");
    await page.waitForFunction(
      (id) => window.kefuAgent.events.some((e) => e.call_id === id && e.type === "transcript.final"
        && e.speaker === "bot" && e.turn_id > 0),
      callId, { timeout: left(), polling: 50 });
    const answering = now();
    await sleep(spec.takeoverDelayMs ?? 1000);

    step("take over");
    const t0 = now();
    result.takeover = await page.evaluate((id) => window.kefuAgent.takeover(id), callId);
    const t1 = now();
    result.afterTakeover = await view(page);

    if (rival) {
      step("the rival takes over");
      await rival.evaluate((id) => window.kefuAgent.select(id), callId);
      // Once its list shows the call taken (so it asks the server before opening a microphone).
      await rival.waitForFunction(
        (id) => { const c = window.kefuAgent.call(id); return !!c && c.state === "human_active"; },
        callId, { timeout: 10000, polling: 100 });
      const r = await rival.evaluate((id) => window.kefuAgent.takeover(id), callId);
      result.rival = { result: r, ...(await view(rival)) };
    }

    step("hand back");
    const answered = await page.evaluate((id) => {
      const c = window.kefuAgent.call(id);
      return c.answered ?? c.created ?? c.firstSeen;
    }, callId);
    const at = answered + spec.handbackS;
    while (now() < at && Date.now() < deadline) await sleep(50);
    const h0 = now();
    result.handback = await page.evaluate((id) => window.kefuAgent.handback(id), callId);
    const h1 = now();
    result.afterHandback = await view(page);

    step("wait for the call to end");
    await page.waitForFunction(
      (id) => { const c = window.kefuAgent.call(id); return !c || !!c.ended; },
      callId, { timeout: left(), polling: 200 });
    result.timings = { answered, answering, takeover: [t0, t1], handback: [h0, h1] };
    result.events = await page.evaluate(
      (id) => window.kefuAgent.events.filter((e) => e.call_id === id), callId);
    result.transcript = await page.evaluate(() => Array.from(
      document.querySelectorAll("#transcript li"),
      (li) => ({ speaker: li.dataset.speaker || null, kind: li.dataset.kind, text: li.textContent })));
    result.heard = await dumpTap(page);
    result.ok = true;
    delete result.step;
  } catch (err) {
    result.error = `${result.step}: ${String((err && err.stack) || err)}`;
    process.exitCode = 1;
  } finally {
    result.logs = run.logs.slice(-30);
    emit(result);
    await run.context.close().catch(() => {});
  }
}

await main();

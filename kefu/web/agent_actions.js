// The workbench's actions on a call: listen in, take over, hand back, hang up, transfer, pass
// to an agent, and notes to the call's record (POST /api/calls/{id}/...). Each never throws:
// it resolves to {ok: true, http, ...the response body} or {ok: false, http, code, message}
// (http 0: the server could not be reached, or the action failed before a request). One action
// at a time per call (app.busy).

import { microphoneError } from "./call.js";
import { $, app, book, mediaLive, nowS, recordError, setStatus, showError } from "./agent_state.js";
import { api, failure } from "./agent_api.js";
import { refreshSoon } from "./agent_feed.js";
import { joinRoom, leaveMedia, setMic } from "./agent_media.js";
import { saveNotes, scheduleRender } from "./agent_view.js";
import { PASS_ON_ACTION, agentNameProblem } from "./workbench.js";

async function withBusy(callId, action, fn) {
  if (!app.token) return { ok: false, code: "signed_out", message: "Sign in first." };
  if (app.busy.has(callId)) {
    return { ok: false, code: "busy", message: `Wait: ${app.busy.get(callId)} is still in progress.` };
  }
  app.busy.set(callId, action);
  showError("");
  scheduleRender();
  try {
    const r = await fn();
    if (!r.ok && app.token) setStatus(`${action[0].toUpperCase()}${action.slice(1)} did not work: see the message below.`);
    return r;
  } finally {
    app.busy.delete(callId);
    scheduleRender();
  }
}

async function doListen(callId) {
  setStatus("Opening the call's audio…");
  const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/listen`);
  if (!r.ok) return failure("Listening in", r, callId);
  const room = (r.body && r.body.room) || `call:${callId}`;
  const media = await joinRoom(callId, room);
  if (media.state === "ended") {
    const e = media.error || { code: "left", message: "Could not join the call's audio." };
    if (!media.error) recordError(e.code, e.message, callId);
    return { ok: false, http: 200, code: e.code, message: e.message };
  }
  return { ok: true, http: r.status, room, media: media.state };
}

export async function listen(callId) {
  return withBusy(callId, "listening in", async () => {
    const r = await doListen(callId);
    if (r.ok) setStatus(r.media === "in-call" ? "Listening in. The caller cannot hear you." : "Joining the call's audio…");
    return r;
  });
}

export async function takeover(callId) {
  return withBusy(callId, "taking over", async () => {
    // Normally: join the room (microphone still muted) first, so the caller hears us the
    // moment the server says the call is ours; the microphone opens only then, so an agent who
    // loses a race for the call is never heard. When the list says the AI does not have the
    // call (someone else does, it is transferring...), ask first: 409 names the owner.
    const known = book.get(callId);
    const askFirst = !!known && known.state !== null && known.state !== "ai_active";
    const joinAndOpenMic = async (open = true) => {
      if (!(app.media && app.media.callId === callId && mediaLive())) {
        const joined = await doListen(callId);
        if (!joined.ok) return joined;
      }
      const m = app.media;
      const track = m && m.call.mic ? m.call.mic.getAudioTracks()[0] : null;
      if (!track || track.readyState === "ended") {
        const e = microphoneError({ name: "NotReadableError" });
        recordError(e.code, e.message, callId);
        return { ok: false, http: 0, code: e.code, message: e.message };
      }
      if (open) setMic(true);
      return { ok: true };
    };
    if (!askFirst) {
      const ready = await joinAndOpenMic(false);
      if (!ready.ok) return ready;
    }
    const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/takeover`);
    const me = app.who.sub;
    if (r.ok && !askFirst) setMic(true);
    if (r.ok && askFirst) {
      const ready = await joinAndOpenMic();
      if (!ready.ok) {
        book.setState(callId, "human_active", me, nowS());
        recordError(ready.code, `You have the call but no audio: ${ready.message} Hand it back or try again.`, callId);
        return { ...ready, takenOver: true };
      }
    }
    if (!r.ok) {
      const err = (r.body && r.body.error) || {};
      if (r.status === 409 && err.owner === me) {
        if (askFirst) {
          const ready = await joinAndOpenMic();
          if (!ready.ok) return ready;
        }
        book.setState(callId, "human_active", me, nowS());
        setStatus("You already have the call. The caller hears you.");
        return { ok: true, http: 409, status: "human_active", already: true };
      }
      setMic(false);
      if (r.status === 409 && err.state) book.setState(callId, err.state, err.owner ?? null, nowS());
      return failure("Taking over", r, callId);
    }
    book.setState(callId, "human_active", me, nowS());
    setStatus("You have the call. The caller hears you; the AI is silent.");
    refreshSoon();
    return { ok: true, http: r.status, ...(r.body || {}) };
  });
}

export async function handback(callId) {
  return withBusy(callId, "handing back", async () => {
    const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/handback`);
    if (!r.ok) {
      const err = (r.body && r.body.error) || {};
      if (r.status === 409 && err.state) book.setState(callId, err.state, err.owner ?? null, nowS());
      return failure("Handing back", r, callId);
    }
    if (app.media && app.media.callId === callId) setMic(false);
    book.setState(callId, "ai_active", null, nowS());
    setStatus(app.media && app.media.callId === callId
      ? "Handed back to the AI. You are still listening (microphone off)."
      : "Handed back to the AI.");
    refreshSoon();
    return { ok: true, http: r.status, ...(r.body || {}) };
  });
}

export async function hangup(callId) {
  return withBusy(callId, "hanging up", async () => {
    const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/hangup`);
    if (!r.ok) return failure("Hanging up", r, callId);
    const call = book.get(callId);
    if (call) call.hangingUp = true;
    setStatus("Hanging up…");
    return { ok: true, http: r.status, ...(r.body || {}) };
  });
}

export async function transfer(callId, target = "") {
  target = String(target || "").trim();
  return withBusy(callId, "transferring", async () => {
    const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/transfer`,
      target ? { target } : undefined);
    if (!r.ok) return failure("Transferring", r, callId);
    const call = book.get(callId);
    if (call) call.transfer.push({ target: target || "(default target)", status: "requested", at: nowS() });
    setStatus(`Transferring the call${target ? ` to ${target}` : ""}…`);
    return { ok: true, http: r.status, ...(r.body || {}) };
  });
}

/** Pass a call a person holds to the agent `agent` (transfer {"agent": ...}, no REFER): the
 *  call stays human_active with them as its owner, and this page leaves its audio. */
export async function passTo(callId, agent = "") {
  agent = String(agent ?? "").trim();
  return withBusy(callId, "passing the call on", async () => {
    const me = app.who.sub;
    const before = book.get(callId);
    const problem = agentNameProblem(agent, { owner: before && before.owner, me });
    if (problem) {
      recordError("bad_agent", problem, callId);
      return { ok: false, http: 0, code: "bad_agent", message: problem };
    }
    const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/transfer`, { agent });
    if (!r.ok) {
      const err = (r.body && r.body.error) || {};
      if (r.status === 409 && err.state) book.setState(callId, err.state, err.owner ?? null, nowS());
      return failure(PASS_ON_ACTION, r, callId);
    }
    const owner = (r.body && r.body.owner) || agent;
    const wasMine = !!before && before.owner === me;
    const m = app.media;
    // Ours no more: leave its audio (a supervisor who passed on a call they only listen to
    // keeps listening).
    if (m && m.callId === callId && (wasMine || m.mic)) leaveMedia();
    book.setState(callId, "human_active", owner, nowS());
    setStatus(app.media && app.media.callId === callId
      ? `Passed the call to ${owner}. You are still listening (microphone off).`
      : `Passed the call to ${owner}.`);
    refreshSoon();
    return { ok: true, http: r.status, ...(r.body || {}) };
  });
}

// --- notes to the call's record (the draft itself: agent_view.js) -------------------------

export async function postNote(callId, text) {
  const r = await api("POST", `/api/calls/${encodeURIComponent(callId)}/notes`, { text });
  if (!r.ok) return failure("Saving the note", r, callId);
  setStatus("Note saved with the call's record.");
  return { ok: true, http: r.status };
}

export async function saveNoteToRecord() {
  const text = $("notes").value.trim();
  if (!app.selected || !text) return;
  const r = await postNote(app.selected, text);
  if (r.ok) {
    $("notes").value = "";
    saveNotes();
  }
}

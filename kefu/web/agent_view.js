// Drawing the agent workbench: the live call list, the chosen call's view (its state, the
// actions it allows, its audio, transfer progress; the transcript and co-pilot come from
// agent_transcript.js), the live-updates line, the sign-in card, and the notes draft kept in
// this browser. Rendering is batched: scheduleRender() draws once ~30 ms later.

import { $, app, book, mediaLive, nowS, recordError, setText } from "./agent_state.js";
import { renderCopilot, renderTranscript, resetTranscript } from "./agent_transcript.js";
import {
  allowedActions, assignedToMe, callDuration, callerDisplay, formatDuration, passedToYouText,
  stateLabel, transferStatusText,
} from "./workbench.js";

const NOTES_PREFIX = "kefu.agent.notes.";

export function showSignIn(show) {
  $("signin").hidden = !show;
  $("workbench").hidden = show;
  if (show) $("token").focus();
}

/** Show call `callId` (null: none) in the view; false when the list does not have it. */
export function select(callId) {
  if (callId !== null && !book.get(callId)) return false;
  if (app.selected === callId) return true;
  app.selected = callId;
  $("hangup-confirm").hidden = true;
  $("btn-hangup").setAttribute("aria-expanded", "false");
  $("transfer-form").hidden = true;
  $("btn-transfer").setAttribute("aria-expanded", "false");
  $("pass-form").hidden = true;
  $("btn-pass").setAttribute("aria-expanded", "false");
  loadNotes();
  render();
  return true;
}

// --- the notes draft (kept in localStorage; agent_actions.js saves it to the record) ------

function loadNotes() {
  const box = $("notes");
  let text = "";
  try {
    text = app.selected ? window.localStorage.getItem(NOTES_PREFIX + app.selected) || "" : "";
  } catch { /* storage disabled */ }
  box.value = text;
}

export function saveNotes() {
  if (!app.selected) return;
  try {
    const text = $("notes").value;
    if (text) window.localStorage.setItem(NOTES_PREFIX + app.selected, text);
    else window.localStorage.removeItem(NOTES_PREFIX + app.selected);
  } catch {
    recordError("storage", "Notes cannot be saved: this browser does not allow local storage here.");
  }
}

// --- drawing --------------------------------------------------------------------------------

export function scheduleRender() {
  if (app.renderTimer) return;
  app.renderTimer = setTimeout(() => {
    app.renderTimer = null;
    render();
  }, 30);
}

export function tick() {
  const now = nowS();
  const removed = book.prune(now, app.selected);
  if (removed.length) render();
  else renderDurations(now);
}

export function render() {
  clearTimeout(app.renderTimer);
  app.renderTimer = null;
  renderList();
  renderView();
  renderFeed();
}

export function renderFeed() {
  const el = $("feed-state");
  const text = {
    live: "Live updates on.",
    connecting: "Connecting to live updates…",
    retrying: "Live updates interrupted. Reconnecting… (the list is still re-read every few seconds)",
    closed: "Live updates off.",
  }[app.feed];
  setText(el, text);
  el.dataset.feed = app.feed;
}

function renderList() {
  const tbody = $("calls");
  const calls = book.list();
  const wanted = new Set(calls.map((c) => `call-${c.call_id}`));
  for (const row of [...tbody.rows]) if (!wanted.has(row.id)) row.remove();
  const now = nowS();
  calls.forEach((call, i) => {
    let row = document.getElementById(`call-${call.call_id}`);
    if (!row) row = newRow(call);
    if (tbody.rows[i] !== row) tbody.insertBefore(row, tbody.rows[i] || null);
    fillRow(row, call, now);
  });
  const live = calls.filter((c) => !c.ended).length;
  setText($("calls-count"), `(${live})`);
  $("calls-empty").hidden = calls.length > 0;
}

function newRow(call) {
  const row = document.createElement("tr");
  row.id = `call-${call.call_id}`;
  row.dataset.callId = call.call_id;
  const first = document.createElement("td");
  const open = document.createElement("button");
  open.type = "button";
  open.className = "open-call";
  open.dataset.callId = call.call_id;
  first.append(open);
  row.append(first);
  for (const name of ["channel", "duration", "state", "intent", "alert"]) {
    const td = document.createElement("td");
    td.className = `col-${name}`;
    if (name === "state" || name === "alert") {
      const badge = document.createElement("span");
      badge.className = "badge";
      td.append(badge);
    }
    row.append(td);
  }
  return row;
}

export function callerText(call) {
  return callerDisplay(call.caller) || (call.channel === "webrtc" ? "Browser caller" : "Unknown caller");
}

function fillRow(row, call, now) {
  const open = row.querySelector(".open-call");
  setText(open, callerText(call));
  open.title = `${call.caller || "Call"} (${call.call_id})`;
  if (call.call_id === app.selected) open.setAttribute("aria-current", "true");
  else open.removeAttribute("aria-current");
  row.classList.toggle("selected", call.call_id === app.selected);
  row.classList.toggle("ended", !!call.ended);
  row.dataset.state = call.state || "unknown";
  setText(row.querySelector(".col-channel"), call.channel || "—");
  setText(row.querySelector(".col-duration"), formatDuration(callDuration(call, now)));
  const state = row.querySelector(".col-state .badge");
  setText(state, stateLabel(call));
  state.dataset.state = call.state || "unknown";
  setText(row.querySelector(".col-intent"), call.lastIntent || "—");
  const alert = row.querySelector(".col-alert .badge");
  const passed = assignedToMe(call, app.who && app.who.sub);
  alert.hidden = !call.alert && !passed;
  setText(alert, call.alert ? "Needs human" : passed ? "Passed to you" : "");
  alert.title = call.alert ? `${call.alert.reason}${call.alert.detail ? ` (${call.alert.detail})` : ""}`
    : passed ? passedToYouText(call.assigned) : "";
  alert.dataset.alert = call.alert || passed ? "1" : "0";
}

function renderDurations(now) {
  for (const call of book.calls.values()) {
    const row = document.getElementById(`call-${call.call_id}`);
    if (row) setText(row.querySelector(".col-duration"), formatDuration(callDuration(call, now)));
  }
  const call = app.selected ? book.get(app.selected) : null;
  if (call) setText($("view-duration"), formatDuration(callDuration(call, now)));
}

function renderView() {
  const call = app.selected ? book.get(app.selected) : null;
  $("view-none").hidden = !!call;
  $("view-detail").hidden = !call;
  if (!call) {
    resetTranscript(null);
    return;
  }
  setText($("view-caller"), callerText(call));
  const badge = $("view-state");
  setText(badge, stateLabel(call));
  badge.dataset.state = call.state || "unknown";
  setText($("view-duration"), formatDuration(callDuration(call, nowS())));
  setText($("view-id"), call.caller ? `${call.call_id} from ${call.caller}` : call.call_id);
  setText($("view-channel"), [call.channel, call.codec].filter(Boolean).join(" · ") || "—");

  const ended = $("view-ended");
  ended.hidden = !call.ended;
  if (call.ended) setText(ended, `The call ended (${call.ended.reason}).`);
  const alert = $("view-alert");
  const passed = assignedToMe(call, app.who && app.who.sub);
  alert.hidden = !call.alert && !passed;
  if (call.alert) {
    setText(alert, call.alert.reason === "caller asked"
      ? "The caller asked for a human."
      : `The AI asked for a human (${call.alert.reason}${call.alert.detail ? `: ${call.alert.detail}` : ""}).`);
  } else if (passed) {
    setText(alert, passedToYouText(call.assigned));
  }

  renderActions(call);
  renderMedia(call);
  renderTransfer(call);
  renderTranscript(call);
  renderCopilot(call);
}

function renderActions(call) {
  const busy = app.busy.get(call.call_id) || null;
  const can = allowedActions(call, { user: app.who && app.who.sub, role: app.who && app.who.role,
    media: app.media && { callId: app.media.callId, state: app.media.state, mic: app.media.mic }, busy });
  $("btn-listen").disabled = !can.listen;
  $("btn-takeover").disabled = !can.takeover;
  $("btn-handback").disabled = !can.handback;
  $("btn-transfer").disabled = !can.transfer;
  $("btn-pass").disabled = !can.passOn;
  $("btn-hangup").disabled = !can.hangup;
  $("btn-leave").hidden = !can.leave;
  if (!can.transfer) {
    $("transfer-form").hidden = true;
    $("btn-transfer").setAttribute("aria-expanded", "false");
  }
  if (!can.passOn) {
    $("pass-form").hidden = true;
    $("btn-pass").setAttribute("aria-expanded", "false");
  }
  if (!can.hangup) {
    $("hangup-confirm").hidden = true;
    $("btn-hangup").setAttribute("aria-expanded", "false");
  }
  const view = $("view");
  if (busy) view.setAttribute("aria-busy", "true");
  else view.removeAttribute("aria-busy");
}

function renderMedia(call) {
  const el = $("media-status");
  const m = app.media;
  let text = "You are not in this call's audio.";
  let kind = "none";
  if (m && m.callId !== call.call_id && mediaLive(m)) {
    text = `You are in the audio of another call (${m.callId}). Listening here leaves it.`;
    kind = "other";
  } else if (m && m.callId === call.call_id) {
    kind = m.state;
    if (m.state === "connecting" || m.state === "idle") text = "Joining the call's audio…";
    else if (m.state === "reconnecting") text = "Connection lost. Reconnecting to the call's audio…";
    else if (m.state === "in-call") {
      text = m.mic ? "Talking: the caller hears you (microphone on)."
        : "Listening: the caller cannot hear you (microphone off).";
      kind = m.mic ? "talking" : "listening";
    }
  }
  const busy = app.busy.get(call.call_id);
  if (busy) text = `${busy[0].toUpperCase()}${busy.slice(1)}… ${text}`;
  setText(el, text);
  el.dataset.media = kind;
  const people = $("participants");
  const others = m && m.callId === call.call_id && mediaLive(m) ? m.participants : [];
  people.hidden = !others.length;
  setText(people, others.length ? `In the audio with you: ${others.map((p) => p.display || p.role || p.id).join(", ")}` : "");
}

function renderTransfer(call) {
  const box = $("transfer-box");
  box.hidden = !call.transfer.length;
  const list = $("transfer-progress");
  if (list.childElementCount === call.transfer.length && list.dataset.callId === call.call_id) return;
  list.dataset.callId = call.call_id;
  list.replaceChildren(...call.transfer.map((p) => {
    const li = document.createElement("li");
    const status = p.status === "requested" ? "requested" : transferStatusText(p.status);
    li.textContent = `${p.target || "transfer"}: ${status}`;
    return li;
  }));
}

// Keeping the call list current: GET /api/calls (on sign-in, every few seconds, and soon after
// the event stream (re)connects, lost events or saw a new call or state) merged with the
// GET /api/events WebSocket (docs/events.md) in the CallBook. Also what events mean for this
// page: a call passed to this agent, a call passed away while it talks in it, a call that
// ended, and the ?call=<id> to open once the list has it.

import { $, app, book, mediaLive, nowS, setAppState, setStatus, skew } from "./agent_state.js";
import { api, authFailed, failure } from "./agent_api.js";
import { leaveMedia } from "./agent_media.js";
import { callerText, renderFeed, scheduleRender, select } from "./agent_view.js";
import { assignedToMe, passedToYouText } from "./workbench.js";

const MAX_EVENTS = 1000;

export async function refreshCalls() {
  if (app.polling || !app.token) return;
  app.polling = true;
  const requestedAt = nowS();
  try {
    const r = await api("GET", "/api/calls");
    if (!app.token) return;
    if (r.status === 401 || r.status === 403) {
      failure("Loading calls", r);
      return;
    }
    if (!r.ok || !r.body || !Array.isArray(r.body.calls)) {
      if (app.state !== "offline") {
        setAppState("offline");
        setStatus(r.status === 0 ? "Cannot reach the server. Retrying…"
          : `The call list could not be loaded (HTTP ${r.status}). Retrying…`);
      }
      return;
    }
    book.applySnapshot(r.body.calls, nowS(), requestedAt);
    if (app.state !== "ready") {
      setAppState("ready");
      setStatus("Ready.");
    }
    for (const id of book.calls.keys()) maybeSelectFromUrl(id);
    scheduleRender();
  } finally {
    app.polling = false;
  }
}

export function refreshSoon() {
  if (app.refreshSoon) return;
  app.refreshSoon = setTimeout(() => {
    app.refreshSoon = null;
    refreshCalls();
  }, 300);
}

// --- the event stream -----------------------------------------------------------------------

export function openFeed() {
  if (!app.token) return;
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  let ws;
  try {
    ws = new WebSocket(`${scheme}//${window.location.host}/api/events?token=${encodeURIComponent(app.token)}`);
  } catch {
    retryFeed();
    return;
  }
  app.ws = ws;
  app.feed = "connecting";
  renderFeed();
  let lastError = null;
  ws.onmessage = (msg) => {
    if (ws !== app.ws) return;
    let ev;
    try {
      ev = JSON.parse(msg.data);
    } catch {
      return;
    }
    if (!ev || typeof ev !== "object") return;
    if (ev.type === "error") {
      lastError = ev;
      return;
    }
    if (ev.type === "events.subscribed") {
      app.feed = "live";
      app.wsRetries = 0;
      renderFeed();
      refreshSoon(); // whatever happened while we were not subscribed
      return;
    }
    if (ev.type === "pong") return;
    onEvent(ev);
  };
  ws.onclose = (ev) => {
    if (ws !== app.ws) return;
    app.ws = null;
    if (ev.code === 4401) {
      authFailed("unauthorized", "Your token is invalid or has expired. Sign in again with a new one.");
    } else if (ev.code === 4403) {
      authFailed("forbidden", "This token may not read live call events (customer tokens cannot). Sign in with an agent or supervisor token.");
    } else {
      if (ev.code === 4400 && lastError) console.warn("kefu events refused", lastError);
      retryFeed();
    }
  };
}

function retryFeed() {
  if (!app.token) return;
  app.feed = "retrying";
  renderFeed();
  const delay = Math.min(15000, 1000 * 2 ** Math.min(4, app.wsRetries++));
  clearTimeout(app.wsTimer);
  app.wsTimer = setTimeout(openFeed, delay);
}

function onEvent(ev) {
  app.events.push(ev);
  if (app.events.length > MAX_EVENTS) app.events.splice(0, app.events.length - MAX_EVENTS);
  if (typeof ev.at === "number") skew.sample(ev.at, Date.now() / 1000);
  const r = book.applyEvent(ev, nowS());
  if (!r) return;
  if (r.dropped) {
    const box = $("dropped");
    box.textContent = `${book.dropped} events missed: live updates fell behind. The list is re-read from the server; transcripts may have gaps.`;
    box.hidden = false;
    refreshSoon();
  }
  if (r.created || r.stateChanged) refreshSoon(); // the owner, caller... come from the list
  if (r.callId) maybeSelectFromUrl(r.callId);
  if (r.ended && app.media && app.media.callId === r.callId) leaveMedia();
  if (r.ended && r.callId === app.selected) setStatus("The call ended.");
  if (r.assigned) onAssigned(r.callId, r.assigned);
  scheduleRender();
}

/** A call.assigned event: a call passed to us is ours to join; one passed away from us while
 *  we talk in it is not ours any more, so this page leaves its audio. */
function onAssigned(callId, a) {
  const me = app.who && app.who.sub;
  if (!me) return;
  const call = book.get(callId);
  if (a.new === me && a.by !== me && assignedToMe(call, me)) {
    setStatus(passedToYouText(a, callerText(call)));
    return;
  }
  const m = app.media;
  if (a.new !== me && a.old === me && m && m.callId === callId && mediaLive(m) && m.mic) {
    leaveMedia();
    const who = !a.by ? "The call was passed" : a.by === me ? "You passed the call" : `${a.by} passed your call`;
    setStatus(`${who} to ${a.new}: you left its audio.`);
  }
}

let pendingUrlCall = "";

/** Open call `id` (?call=<id>) as soon as the list or an event shows it. */
export function selectWhenListed(id) {
  pendingUrlCall = id;
}

function maybeSelectFromUrl(id) {
  if (pendingUrlCall && id === pendingUrlCall) {
    pendingUrlCall = "";
    select(id);
  }
}

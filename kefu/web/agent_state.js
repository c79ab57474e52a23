// The agent workbench's shared state, used by agent.js and every agent_*.js module: the
// signed-in session and the page's own bookkeeping (app), the calls it knows (book, a CallBook
// from workbench.js), the server's clock (skew), and the status and error messages every part
// of the page writes. Importing it only creates these objects; it touches no DOM until called.

import { CallBook, ClockSkew } from "./workbench.js";

const MAX_ERRORS = 100;

export const $ = (id) => document.getElementById(id);

export const book = new CallBook();
export const skew = new ClockSkew();

export const app = {
  token: "",
  who: null,            // {sub, role, exp}
  state: "signed-out",  // signed-out | loading | ready | offline | unauthorized | forbidden
  selected: null,
  events: [],
  errors: [],
  busy: new Map(),      // call id -> action in flight
  media: null,          // {callId, room, call: KefuCall, state, mic, participants, error}
  ws: null,
  feed: "closed",       // closed | connecting | live | retrying
  wsRetries: 0,
  wsTimer: null,
  pollTimer: null,
  tickTimer: null,
  polling: false,
  refreshSoon: null,
  renderTimer: null,
  rendered: { callId: null, lines: new Map(), copilot: "" },
};

export const nowS = () => skew.now(Date.now() / 1000);

// --- messages -------------------------------------------------------------------------------

export function setStatus(text, state = app.state) {
  const el = $("status");
  el.textContent = text;
  el.dataset.state = state;
}

export function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

export function recordError(code, message, callId = null) {
  app.errors.push({ at: Date.now() / 1000, code, message, call_id: callId });
  if (app.errors.length > MAX_ERRORS) app.errors.shift();
  showError(message);
}

export function setAppState(state) {
  app.state = state;
  document.body.dataset.state = state;
}

export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/** Whether the page is in, or joining, a call's audio (app.media, or the media record given). */
export function mediaLive(media = app.media) {
  return !!media && (media.state === "connecting" || media.state === "in-call" || media.state === "reconnecting");
}

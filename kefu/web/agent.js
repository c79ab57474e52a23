// The agent workbench (agent.html, served at /agent): the live call list, a call's transcript
// and co-pilot, and the actions listen in / take over / hand back / transfer / pass to an
// agent / hang up.
//
// Data: GET /api/calls (on sign-in, every POLL_MS, and after the event stream (re)connects or
// lost events) merged with the GET /api/events WebSocket (docs/events.md) in a CallBook
// (workbench.js). Audio: POST /api/calls/{id}/listen opens the call's room "call:<id>", which
// this page joins with call.js's KefuCall, microphone muted until a takeover. Passing a call to
// a colleague is POST /api/calls/{id}/transfer {"agent": user}; the colleague's page gets
// call.assigned and joins the call by taking it over.
//
// Token: ?token=<JWT> (removed from the address bar once read) or pasted. Optional ?call=<id>.
//
// For automated browser tests: window.kefuAgent = {calls, selected, events, state, errors,
// media, listen(id), takeover(id), handback(id), hangup(id), transfer(id, target),
// passTo(id, agent), leave(), note(id, text), select(id), signIn(token), signOut(), refresh(),
// stats()}. Actions never throw: they
// resolve to {ok: true, http, ...the response body} or {ok: false, http, code, message} (http:
// the HTTP status, 0 when the server could not be reached or it failed before a request);
// hangup() does not ask to confirm (the button does).
//
// The page's modules: agent.js (this file: sign-in, wiring the page, window.kefuAgent),
// agent_state.js (the shared state and messages), agent_api.js (requests with the token; a
// refused token signs out), agent_feed.js (the call list and the event stream),
// agent_actions.js (the actions), agent_media.js (the call's audio), agent_view.js (drawing
// the list and the call) and agent_transcript.js (the transcript and co-pilot).

import { $, app, book, recordError, setAppState, setStatus, showError } from "./agent_state.js";
import { stopAll } from "./agent_api.js";
import { openFeed, refreshCalls, selectWhenListed } from "./agent_feed.js";
import {
  handback, hangup, listen, passTo, postNote, saveNoteToRecord, takeover, transfer,
} from "./agent_actions.js";
import { leaveMedia } from "./agent_media.js";
import { render, saveNotes, select, showSignIn, tick } from "./agent_view.js";
import { copyText } from "./agent_transcript.js";
import { describeToken } from "./workbench.js";

const POLL_MS = 4000;
const TICK_MS = 1000;

// --- sign-in --------------------------------------------------------------------------------

function readParams() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get("token") || "";
  const call = url.searchParams.get("call") || "";
  if (token) {
    // Keep the credential out of the history and of anything copied from the address bar.
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return { token, call };
}

function signIn(token) {
  token = String(token || "").trim();
  showError("");
  if (!token) {
    recordError("no_token", "Paste an agent or supervisor token to sign in.");
    $("token").focus();
    return { ok: false, code: "no_token" };
  }
  const info = describeToken(token, Date.now() / 1000);
  if (!info.ok) {
    setAppState(info.problem === "customer" || info.problem === "role" ? "forbidden" : "signed-out");
    recordError(info.problem, info.message);
    showSignIn(true);
    return { ok: false, code: info.problem, message: info.message };
  }
  stopAll();
  app.token = token;
  app.who = { sub: info.sub, role: info.role, exp: info.exp };
  $("who-name").textContent = info.sub || "(no name)";
  $("who-role").textContent = info.role;
  $("whoami").hidden = false;
  $("token").value = "";
  showSignIn(false);
  setAppState("loading");
  setStatus("Loading calls…");
  refreshCalls();
  openFeed();
  app.pollTimer = setInterval(refreshCalls, POLL_MS);
  app.tickTimer = setInterval(tick, TICK_MS);
  return { ok: true, sub: info.sub, role: info.role };
}

function signOut() {
  stopAll();
  app.token = "";
  app.who = null;
  app.selected = null;
  book.calls.clear();
  $("whoami").hidden = true;
  setAppState("signed-out");
  setStatus("Signed out.");
  showSignIn(true);
  render();
}

// --- wiring ---------------------------------------------------------------------------------

function wire() {
  $("signin-form").addEventListener("submit", (e) => {
    e.preventDefault();
    signIn($("token").value);
  });
  $("btn-signout").addEventListener("click", signOut);
  $("calls").addEventListener("click", (e) => {
    const row = e.target.closest("tr[data-call-id]");
    if (row) select(row.dataset.callId);
  });
  const onSelected = (fn) => () => { if (app.selected) fn(app.selected); };
  $("btn-listen").addEventListener("click", onSelected(listen));
  $("btn-takeover").addEventListener("click", onSelected(takeover));
  $("btn-handback").addEventListener("click", onSelected(handback));
  $("btn-leave").addEventListener("click", () => {
    const call = app.media && book.get(app.media.callId);
    leaveMedia();
    setStatus(call && call.state === "human_active" && call.owner === (app.who && app.who.sub)
      ? "You left the call's audio but still hold the call: take it over to rejoin, pass it on or hand it back."
      : "You left the call's audio.");
  });
  $("btn-hangup").addEventListener("click", () => {
    const box = $("hangup-confirm");
    box.hidden = !box.hidden;
    $("btn-hangup").setAttribute("aria-expanded", String(!box.hidden));
    if (!box.hidden) $("btn-hangup-no").focus();
  });
  $("btn-hangup-no").addEventListener("click", () => {
    $("hangup-confirm").hidden = true;
    $("btn-hangup").setAttribute("aria-expanded", "false");
    $("btn-hangup").focus();
  });
  $("btn-hangup-yes").addEventListener("click", () => {
    $("hangup-confirm").hidden = true;
    $("btn-hangup").setAttribute("aria-expanded", "false");
    if (app.selected) hangup(app.selected);
  });
  $("btn-transfer").addEventListener("click", () => {
    const form = $("transfer-form");
    form.hidden = !form.hidden;
    $("btn-transfer").setAttribute("aria-expanded", String(!form.hidden));
    if (!form.hidden) {
      closePassForm();
      $("transfer-target").focus();
    }
  });
  $("btn-transfer-cancel").addEventListener("click", () => {
    $("transfer-form").hidden = true;
    $("btn-transfer").setAttribute("aria-expanded", "false");
    $("btn-transfer").focus();
  });
  $("transfer-form").addEventListener("submit", (e) => {
    e.preventDefault();
    $("transfer-form").hidden = true;
    $("btn-transfer").setAttribute("aria-expanded", "false");
    if (app.selected) transfer(app.selected, $("transfer-target").value);
  });
  $("btn-pass").addEventListener("click", () => {
    const form = $("pass-form");
    form.hidden = !form.hidden;
    $("btn-pass").setAttribute("aria-expanded", String(!form.hidden));
    if (!form.hidden) {
      $("transfer-form").hidden = true;
      $("btn-transfer").setAttribute("aria-expanded", "false");
      $("pass-agent").focus();
    }
  });
  $("btn-pass-cancel").addEventListener("click", () => {
    closePassForm();
    $("btn-pass").focus();
  });
  $("pass-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!app.selected) return;
    const r = await passTo(app.selected, $("pass-agent").value);
    if (r.ok) {
      closePassForm();
      $("pass-agent").value = "";
    } else if (!$("pass-form").hidden) {
      $("pass-agent").focus(); // a name to fix (or another try): the form stays open
    }
  });
  $("copilot-list").addEventListener("click", (e) => {
    const button = e.target.closest("button.copy");
    if (button) copyText(button);
  });
  $("notes").addEventListener("input", saveNotes);
  $("btn-note").addEventListener("click", saveNoteToRecord);
}

function closePassForm() {
  $("pass-form").hidden = true;
  $("btn-pass").setAttribute("aria-expanded", "false");
}

function main() {
  window.kefuAgent = {
    get calls() { return book.list(); },
    get selected() { return app.selected; },
    get events() { return app.events; },
    get state() { return app.state; },
    get errors() { return app.errors; },
    get who() { return app.who; },
    get feed() { return app.feed; },
    get media() {
      const m = app.media;
      if (!m) return null;
      const track = m.call.mic ? m.call.mic.getAudioTracks()[0] : null;
      return { callId: m.callId, room: m.room, state: m.state, mic: m.mic,
        micTrackEnabled: track ? track.enabled : null, participants: m.participants, error: m.error };
    },
    get dropped() { return book.dropped; },
    call: (id) => book.get(id),
    listen, takeover, handback, hangup, transfer, passTo, select, signIn, signOut,
    note: postNote,
    leave: () => { leaveMedia(); return { ok: true }; },
    refresh: refreshCalls,
    stats: async () => (app.media ? app.media.call.stats() : null),
  };
  wire();
  const params = readParams();
  selectWhenListed(params.call);
  setAppState("signed-out");
  render();
  if (params.token) signIn(params.token);
  else showSignIn(true);
}

main();

// Requests to the kefu HTTP API with the signed-in token, and what a refused token does: the
// page stops everything (stopAll: polling, the event stream, the call's audio) and asks to sign
// in again (authFailed).
//
// api() never throws: it resolves to {ok, status, body} (status 0: the server could not be
// reached). failure() turns a failed request into the {ok: false, http, code, message} result
// the actions return, and records the error.

import { $, app, recordError, setAppState, setStatus } from "./agent_state.js";
import { leaveMedia } from "./agent_media.js";
import { showSignIn } from "./agent_view.js";
import { apiErrorText } from "./workbench.js";

export function stopAll() {
  clearInterval(app.pollTimer);
  clearInterval(app.tickTimer);
  clearTimeout(app.wsTimer);
  clearTimeout(app.refreshSoon);
  app.pollTimer = app.tickTimer = app.wsTimer = app.refreshSoon = null;
  if (app.ws) {
    const ws = app.ws;
    app.ws = null;
    ws.close(1000);
  }
  app.feed = "closed";
  leaveMedia();
}

export function authFailed(code, message) {
  stopAll();
  app.token = "";
  app.who = null;
  setAppState(code === "forbidden" ? "forbidden" : "unauthorized");
  setStatus("Signed out: the server refused the token.");
  recordError(code, message);
  $("whoami").hidden = true;
  showSignIn(true);
}

export async function api(method, path, body) {
  const init = { method, headers: { Authorization: `Bearer ${app.token}` }, cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    return { ok: false, status: 0, body: null };
  }
  let data = null;
  try {
    data = await res.json();
  } catch { /* not JSON (an HTML 404 from a route that is not there...) */ }
  return { ok: res.ok, status: res.status, body: data };
}

export function failure(action, r, callId) {
  const message = apiErrorText(action, r.status, r.body, app.who && app.who.sub);
  const code = (r.body && r.body.error && r.body.error.code) || (r.status ? `http_${r.status}` : "unreachable");
  if (r.status === 401 || (r.status === 403 && code === "forbidden")) {
    authFailed(r.status === 401 ? "unauthorized" : "forbidden", message);
  } else {
    recordError(code, message, callId);
  }
  return { ok: false, http: r.status, code, message, error: r.body && r.body.error };
}

// The caller page: wires the form and panels in index.html to a KefuCall (call.js).
//
// Token: ?token=<JWT> in the address (removed from the address bar once read) or pasted into
// the "Access token" field. Optional ?room=<room>, ?display=<name>, ?relay=1 (TURN only,
// iceTransportPolicy "relay") and ?autostart=1 (call at once; used by the browser tests, which
// also read window.kefu).

import { KefuCall } from "./call.js";

const STATUS_TEXT = {
  idle: "Ready to call.",
  connecting: "Connecting…",
  "in-call": "In call. Speak whenever you like.",
  reconnecting: "Connection lost. Reconnecting…",
  ended: "Call ended.",
};

const $ = (id) => document.getElementById(id);

function readParams() {
  const url = new URL(window.location.href);
  const params = {
    token: url.searchParams.get("token") || "",
    room: url.searchParams.get("room") || "",
    display: url.searchParams.get("display") || "",
    relay: url.searchParams.get("relay") === "1",
    autostart: url.searchParams.get("autostart") === "1",
  };
  if (params.token) {
    // Keep the credential out of the history and of anything the user copies from the bar.
    url.searchParams.delete("token");
    window.history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return params;
}

function newRoomName() {
  const bytes = new Uint8Array(6);
  crypto.getRandomValues(bytes);
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function setState(state) {
  const status = $("status");
  status.dataset.state = state;
  status.textContent = STATUS_TEXT[state] || state;
  const active = state === "connecting" || state === "in-call" || state === "reconnecting";
  $("call").hidden = active;
  $("call").disabled = active;
  $("hangup").hidden = !active;
  $("mute").hidden = state !== "in-call" && state !== "reconnecting";
  $("media").hidden = !active;
  document.body.dataset.callState = state;
  window.kefu.state = state;
}

function addTranscriptLine(event) {
  const list = $("transcript");
  const speaker = event.speaker || event.role || "system";
  const text = String(event.text || "");
  if (!text) return;
  $("transcript-empty").hidden = true;
  // Partial results rewrite the speaker's last unfinished line; finals freeze it.
  let line = list.querySelector(`li[data-partial="1"][data-speaker="${CSS.escape(speaker)}"]`);
  if (!line) {
    line = document.createElement("li");
    line.dataset.speaker = speaker;
    const who = document.createElement("span");
    who.className = "speaker";
    const you = speaker === "customer" || speaker === "caller";
    who.textContent = you ? "You" : speaker === "bot" ? "Assistant" : speaker;
    const said = document.createElement("span");
    said.className = "text";
    line.append(who, said);
    list.append(line);
  }
  line.querySelector(".text").textContent = text;
  line.dataset.partial = event.final === false ? "1" : "0";
  line.scrollIntoView({ block: "nearest" });
}

function onRoomEvent(event) {
  window.kefu.events.push(event);
  // "transcript.final" (docs/events.md) is each line kefu's AI agent hears or says.
  if (event.type === "transcript" || event.type === "transcript.final") addTranscriptLine(event);
  else if (event.type === "call_state" && event.state) {
    addTranscriptLine({ speaker: "system", text: `Call ${event.state}`, final: true });
  }
}

function playTrack(track, streams) {
  if (track.kind === "video") {
    const video = $("remote-video");
    video.srcObject = streams[0] || new MediaStream([track]);
    video.hidden = false;
    track.addEventListener("ended", () => { video.hidden = true; });
    return;
  }
  const audio = document.createElement("audio");
  audio.autoplay = true;
  audio.srcObject = new MediaStream([track]);
  $("remote-audio").append(audio);
  audio.play().catch(() => { /* autoplay refused: the click that started the call allows it */ });
  track.addEventListener("ended", () => audio.remove());
}

function startCall(params) {
  showError("");
  const token = $("token").value.trim();
  if (!token) {
    showError("An access token is needed to call. Open your call link again or paste the token.");
    $("token-details").open = true;
    $("token").focus();
    return;
  }
  const room = $("room").value.trim() || newRoomName();
  $("room").value = room;
  $("remote-audio").replaceChildren();
  const call = new KefuCall({ token, room, display: $("display").value.trim(), relayOnly: params.relay });
  window.kefu.call = call;
  window.kefu.error = null;
  call.addEventListener("state", (e) => setState(e.detail.state));
  call.addEventListener("error", (e) => {
    window.kefu.error = e.detail;
    showError(e.detail.message);
  });
  call.addEventListener("track", (e) => playTrack(e.detail.track, e.detail.streams));
  call.addEventListener("roomevent", (e) => onRoomEvent(e.detail.event));
  call.start();
}

function main() {
  window.kefu = {
    state: "idle", error: null, call: null, events: [],
    stats: async () => (window.kefu.call ? window.kefu.call.stats() : null),
  };
  const params = readParams();
  $("token").value = params.token;
  $("room").value = params.room;
  $("display").value = params.display;
  if (!params.token) $("token-details").open = true;
  $("call-form").addEventListener("submit", (e) => {
    e.preventDefault();
    startCall(params);
  });
  $("hangup").addEventListener("click", () => window.kefu.call && window.kefu.call.hangUp());
  $("mute").addEventListener("click", () => {
    const button = $("mute");
    const muted = button.getAttribute("aria-pressed") !== "true";
    button.setAttribute("aria-pressed", String(muted));
    button.textContent = muted ? "Unmute microphone" : "Mute microphone";
    if (window.kefu.call) window.kefu.call.setMuted(muted);
  });
  setState("idle");
  if (params.autostart) startCall(params);
}

main();

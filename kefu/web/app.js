// The caller page: wires the form and panels in index.html to a KefuCall (call.js).
//
// Token: ?token=<JWT> in the address (removed from the address bar once read) or pasted into
// the "Access token" field. Optional ?room=<room>, ?display=<name>, ?relay=1 (TURN only,
// iceTransportPolicy "relay"), ?avatar=video|weights|off (how the agent's avatar comes: the
// server's video, or drawn here from the face weights of the kefu-avatar channel; default
// video) and ?autostart=1 (call at once; used by the browser tests, which also read
// window.kefu, window.kefu.avatar included).

import { KefuCall } from "./call.js";
import { loadHeadMesh } from "./avatar_mesh.js";
import { AvatarCanvas, NO_WEBGL_TEXT } from "./avatar_canvas.js";
import { AudioDelayMonitor, WeightsPlayout, decodeWeightsFrame } from "./avatar_playout.js";
import { avatarDisplay, parseAvatarMode } from "./avatar_view.js";

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
    avatar: parseAvatarMode(url.searchParams.get("avatar")),
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
  if (state === "ended") avatarStop();
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

// --- the avatar --------------------------------------------------------------------------
//
// The "Agent" box shows the server's avatar video (a video track from the server's
// renegotiation offer) or a canvas drawn from the face weights of the kefu-avatar channel
// (avatar_playout.js, avatar_canvas.js; avatar_view.js decides which shows). The toggle
// switches between the two and tells the server ({"type": "avatar.mode", ...} on
// kefu-events, call.js), which then sends one or the other.
// In video mode the canvas stands in while weights come and no video is live.

const WEIGHTS_ACTIVE_MS = 3000; // weights seen this recently: the server is sending them
const avatar = {
  mode: "video", playout: null, monitor: null, view: null, canvas: null, videoTrack: null,
  videoLive: false, lastFrameAt: -Infinity, timer: null, webgl: null, mesh: null, meshPromise: null,
  problem: null, generation: 0,
};

function avatarState() {
  return {
    mode: avatar.mode,
    videoLive: avatar.videoLive,
    weightsActive: performance.now() - avatar.lastFrameAt < WEIGHTS_ACTIVE_MS,
    webgl: avatar.webgl,
    meshReady: Boolean(avatar.mesh),
    problem: avatar.problem,
  };
}

function updateAvatar() {
  // Outside a call (no playout) the box is hidden and shows nothing.
  const { show, status } = avatar.playout ? avatarDisplay(avatarState()) : { show: "none", status: "" };
  const video = $("remote-video");
  video.hidden = show !== "video";
  $("avatar-canvas-box").hidden = show !== "canvas";
  $("avatar-stage").dataset.show = show;
  const line = $("avatar-status");
  if (line.textContent !== status) line.textContent = status;
  line.hidden = !status;
  const toggle = $("avatar-toggle");
  const on = avatar.mode === "video";
  toggle.setAttribute("aria-pressed", String(on));
  toggle.textContent = on ? "Avatar video: on" : "Avatar video: off";
  Object.assign(window.kefu.avatar, {
    mode: avatar.mode, show, status, videoLive: avatar.videoLive, webgl: avatar.webgl,
    meshReady: Boolean(avatar.mesh), drawn: avatar.view ? avatar.view.frames : 0,
    delayMs: avatar.playout ? avatar.playout.delayMs : null,
    playout: avatar.playout ? { ...avatar.playout.counters } : null,
  });
  if (show === "video" && video.paused && video.srcObject) video.play().catch(() => {});
  // Last: starting the canvas may find a problem and update the box again.
  if (show === "canvas" && avatar.playout) avatarCanvasStart(); // only during a call
  else if (avatar.view) avatar.view.stop();
}

// A canvas (and WebGL context) per call: destroy() gives the context back, and a canvas
// whose context was given back cannot draw again.
function avatarCanvasStart() {
  if (avatar.webgl === false || avatar.problem) return;
  if (!avatar.view) {
    const canvas = document.createElement("canvas");
    canvas.id = "avatar-canvas";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", "The agent's animated face");
    $("avatar-canvas-box").replaceChildren(canvas);
    const view = new AvatarCanvas(canvas, {
      playout: avatar.playout,
      onProblem: (problem) => { avatar.problem = problem; avatar.view = null; updateAvatar(); },
    });
    avatar.canvas = canvas;
    if (!view.ok) {
      if (view.problem === NO_WEBGL_TEXT) avatar.webgl = false;
      else avatar.problem = view.problem;
      canvas.remove();
      avatar.canvas = null;
      updateAvatar();
      return;
    }
    avatar.webgl = true;
    avatar.view = view;
  }
  if (!avatar.mesh) {
    avatarLoadMesh();
    return;
  }
  if (!avatar.view.mesh && !avatar.view.setMesh(avatar.mesh)) return;
  avatar.view.start();
}

function avatarLoadMesh() {
  if (avatar.meshPromise) return;
  const generation = avatar.generation;
  avatar.meshPromise = loadHeadMesh().then((mesh) => {
    avatar.mesh = mesh; // kept for the next call: the head does not change
  }, (err) => {
    avatar.meshPromise = null;
    if (generation === avatar.generation) avatar.problem = `the head model did not load (${err.message})`;
  }).then(() => {
    if (generation === avatar.generation) updateAvatar();
  });
}

function avatarStart(call, mode) {
  avatarStop();
  avatar.generation += 1;
  avatar.mode = mode;
  avatar.problem = null;
  avatar.lastFrameAt = -Infinity;
  Object.assign(window.kefu.avatar, { frames: 0, badFrames: 0 });
  avatar.playout = new WeightsPlayout();
  avatar.monitor = new AudioDelayMonitor(
    () => (call.pc ? call.pc.getStats() : null),
    (ms) => { if (avatar.playout) avatar.playout.setDelay(ms); },
  );
  avatar.monitor.start();
  // Once a second: weights that stopped coming no longer hold the canvas up.
  avatar.timer = setInterval(updateAvatar, 1000);
  call.addEventListener("avatarframe", (e) => onAvatarFrame(e.detail.data));
  call.addEventListener("rejoin", () => {
    // A new peer connection: the old video track is gone, the bot's audio clock starts over.
    avatar.videoTrack = null;
    avatar.videoLive = false;
    if (avatar.playout) avatar.playout.clear();
    updateAvatar();
  });
  updateAvatar();
}

function avatarStop() {
  if (avatar.monitor) avatar.monitor.stop();
  if (avatar.timer !== null) clearInterval(avatar.timer);
  if (avatar.view) avatar.view.destroy();
  if (avatar.canvas) avatar.canvas.remove();
  Object.assign(avatar, { monitor: null, timer: null, view: null, canvas: null, playout: null,
    videoTrack: null, videoLive: false, problem: null, lastFrameAt: -Infinity });
  const video = $("remote-video");
  video.srcObject = null;
  video.hidden = true;
  if (window.kefu && window.kefu.avatar) updateAvatar();
}

function onAvatarFrame(data) {
  if (avatar.mode === "off" || !avatar.playout) return;
  let frame;
  try {
    frame = decodeWeightsFrame(data);
  } catch {
    window.kefu.avatar.badFrames = (window.kefu.avatar.badFrames || 0) + 1;
    return;
  }
  const wasActive = avatarState().weightsActive;
  avatar.playout.push(frame, performance.now());
  avatar.lastFrameAt = performance.now();
  window.kefu.avatar.frames = (window.kefu.avatar.frames || 0) + 1;
  if (!wasActive) updateAvatar();
}

function setAvatarMode(mode) {
  avatar.mode = mode;
  if (avatar.playout) avatar.playout.clear();
  if (window.kefu.call) window.kefu.call.setAvatarMode(mode);
  updateAvatar();
}

function playVideo(track, streams) {
  const video = $("remote-video");
  video.srcObject = streams[0] || new MediaStream([track]);
  avatar.videoTrack = track;
  const live = () => {
    if (avatar.videoTrack !== track) return;
    avatar.videoLive = track.readyState === "live" && !track.muted;
    updateAvatar();
  };
  track.addEventListener("ended", live);
  track.addEventListener("mute", live);
  track.addEventListener("unmute", live);
  live();
}

function playTrack(track, streams) {
  if (track.kind === "video") {
    playVideo(track, streams);
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
  const call = new KefuCall({ token, room, display: $("display").value.trim(), relayOnly: params.relay,
    avatarMode: avatar.mode });
  window.kefu.call = call;
  window.kefu.error = null;
  call.addEventListener("state", (e) => setState(e.detail.state));
  call.addEventListener("error", (e) => {
    window.kefu.error = e.detail;
    showError(e.detail.message);
  });
  call.addEventListener("track", (e) => playTrack(e.detail.track, e.detail.streams));
  call.addEventListener("roomevent", (e) => onRoomEvent(e.detail.event));
  try {
    avatarStart(call, avatar.mode);
  } catch (err) {
    console.warn("kefu: the avatar could not start", err); // the call goes on without it
  }
  call.start();
}

function main() {
  window.kefu = {
    state: "idle", error: null, call: null, events: [],
    stats: async () => (window.kefu.call ? window.kefu.call.stats() : null),
    avatar: { mode: "video", show: "none", status: "", frames: 0, badFrames: 0 },
  };
  const params = readParams();
  avatar.mode = params.avatar;
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
  $("avatar-toggle").addEventListener("click", () => {
    setAvatarMode(avatar.mode === "video" ? "weights" : "video");
  });
  updateAvatar();
  setState("idle");
  if (params.autostart) startCall(params);
}

main();

// The call's audio: joining a call's room ("call:<id>", named by POST .../listen) with
// call.js's KefuCall, microphone muted until a takeover opens it; playing what the room sends;
// leaving. app.media is the one room this page is in (mediaLive() in agent_state.js tells
// whether it is live).

import { KefuCall } from "./call.js";
import { $, app, mediaLive, recordError } from "./agent_state.js";
import { scheduleRender } from "./agent_view.js";

const JOIN_TIMEOUT_MS = 15000;

export function setMic(on) {
  const m = app.media;
  if (!m) return;
  m.mic = !!on;
  m.call.setMuted(!on);
  scheduleRender();
}

export function leaveMedia() {
  const m = app.media;
  if (!m) return;
  app.media = null;
  m.call.hangUp();
  $("remote-audio").replaceChildren();
  scheduleRender();
}

function playTrack(track) {
  if (track.kind !== "audio") return;
  const audio = document.createElement("audio");
  audio.autoplay = true;
  audio.srcObject = new MediaStream([track]);
  $("remote-audio").append(audio);
  audio.play().catch(() => { /* autoplay refused: the click that joined allows it */ });
  track.addEventListener("ended", () => audio.remove());
}

/** Join room `room` for call `callId` (leaving another call's room first); resolves to the
 *  media record once it is in the call, ended, or still connecting after JOIN_TIMEOUT_MS. */
export async function joinRoom(callId, room) {
  if (app.media && app.media.callId === callId && mediaLive()) return app.media;
  leaveMedia();
  const display = `Agent ${(app.who && app.who.sub) || ""}`.trim().slice(0, 64);
  const call = new KefuCall({ token: app.token, room, display });
  const media = { callId, room, call, state: "idle", mic: false, participants: [], error: null };
  app.media = media;
  const settled = new Promise((resolve) => {
    const timer = setTimeout(() => resolve(media), JOIN_TIMEOUT_MS);
    call.addEventListener("state", (e) => {
      media.state = e.detail.state;
      if (media.state === "in-call" || media.state === "ended") {
        clearTimeout(timer);
        resolve(media);
      }
      if (media.state === "ended" && app.media === media) {
        app.media = null;
        $("remote-audio").replaceChildren();
      }
      scheduleRender();
    });
  });
  call.addEventListener("error", (e) => {
    media.error = e.detail;
    // Microphone problems come as call.js's microphoneError() texts.
    recordError(e.detail.code, e.detail.message, callId);
  });
  call.addEventListener("track", (e) => { if (app.media === media) playTrack(e.detail.track); });
  call.addEventListener("participants", (e) => {
    media.participants = e.detail.participants || [];
    scheduleRender();
  });
  await call.start(); // the microphone is open (or the call failed) before the room is joined
  if (call.state !== "ended") call.setMuted(true); // listen silently until a takeover
  scheduleRender();
  return settled;
}

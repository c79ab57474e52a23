// One call to kefu: the signaling WebSocket (docs/signaling.md, protocol v1) plus the
// RTCPeerConnection. No DOM here: app.js listens to the events this class dispatches.
//
// Events (CustomEvent, detail in brackets):
//   state   [{state}]  idle | connecting | in-call | reconnecting | ended
//   error   [{code, message}]  a readable, final error (the call then ends)
//   track   [{track, streams}]  a remote track to play
//   roomevent [{event}]  a room event (transcript, call state...), deduplicated
//   participants [{participants}]  the others in the room
//   rejoin  [{attempt}]  the session was lost with its server: joining the room again
//   avatarframe [{data}]  one binary message of the kefu-avatar channel (an ArrayBuffer: a
//                          60-byte face-weights frame, docs/avatar.md; avatar_playout.js decodes)
//
// Data channels: "kefu-events" (JSON room events both ways; the page sends
// {"type": "avatar.mode", "mode": "video" | "weights" | "off"} on it when it opens and on
// every setAvatarMode) and "kefu-avatar" (unordered, no retransmits: the server's face
// weights; nothing is sent on it).

const RESUMABLE_CLOSE_CODES = new Set([1006, 1009, 1011, 1012, 1013, 4408, 4429]);
const FINAL_ERRORS = {
  bad_token: "Your access token is invalid or has expired. Ask for a new call link.",
  forbidden: "This token does not allow joining that room.",
  unknown_room: "That room does not exist (any more).",
  room_full: "The room is full. Please try again later.",
  node_full: "The service is busy right now. Please try again in a minute.",
  rate_limited: "Too many attempts. Please wait a moment and try again.",
  unknown_session: "The call could not be resumed. Please call again.",
  internal: "The server had a problem. Please call again.",
};
const MAX_REJOINS = 3;
export const AVATAR_MODES = ["video", "weights", "off"];
export const EVENTS_CHANNEL = "kefu-events";
export const AVATAR_CHANNEL = "kefu-avatar";
const CLOSE_TO_CODE = {
  4401: "bad_token", 4403: "forbidden", 4404: "unknown_room", 4409: "room_full",
  4410: "unknown_session", 4503: "node_full", 1011: "internal",
};

export function wsUrlFor(location, token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/ws?token=${encodeURIComponent(token)}`;
}

export function microphoneError(err) {
  switch (err && err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return { code: "mic_denied",
        message: "Microphone access was denied. Allow the microphone for this page and call again." };
    case "NotFoundError":
    case "OverconstrainedError":
      return { code: "mic_missing", message: "No microphone was found. Connect one and call again." };
    case "NotReadableError":
      return { code: "mic_busy",
        message: "The microphone is in use by another application or could not be started." };
    default:
      return { code: "mic_error", message: `The microphone could not be opened (${err && err.name}).` };
  }
}

export class KefuCall extends EventTarget {
  constructor({ token, room, display = "", relayOnly = false, location = window.location,
                resumeGraceMs = 20000, connectTimeoutMs = 8000, avatarMode = "video" }) {
    super();
    this.token = token;
    this.room = room;
    this.display = display;
    this.relayOnly = relayOnly;
    this.location = location;
    this.resumeGraceMs = resumeGraceMs;
    this.connectTimeoutMs = connectTimeoutMs;
    this.state = "idle";
    this.session = null;
    this.participant = null;
    this.pc = null;
    this.ws = null;
    this.mic = null;
    this.channel = null;
    this.avatarChannel = null;
    this.avatarMode = AVATAR_MODES.includes(avatarMode) ? avatarMode : "video";
    this._everOpened = false;
    this._earlyCandidates = [];
    this._seenEvents = [];
    this._pingTimer = null;
    this._droppedAt = null;
    this._ending = false;
    this._rejoins = 0;
  }

  async start() {
    this._setState("connecting");
    try {
      this.mic = await navigator.mediaDevices.getUserMedia({ audio: true, video: false });
    } catch (err) {
      this._fail(microphoneError(err));
      return;
    }
    this._openSocket(false);
  }

  hangUp() {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this._send({ type: "leave" });
    this._end();
  }

  setMuted(muted) {
    if (!this.mic) return;
    for (const track of this.mic.getAudioTracks()) track.enabled = !muted;
  }

  // How the agent's avatar reaches this page: "video" (the server's video track), "weights"
  // (face weights on kefu-avatar, drawn here) or "off". Told to the server now if the events
  // channel is open, else when it opens (and again on every new peer connection).
  setAvatarMode(mode) {
    if (!AVATAR_MODES.includes(mode)) throw new TypeError(`avatar mode must be one of ${AVATAR_MODES.join(", ")}`);
    this.avatarMode = mode;
    this._sendAvatarMode();
  }

  _sendAvatarMode() {
    const channel = this.channel;
    if (!channel || channel.readyState !== "open") return false;
    try {
      channel.send(JSON.stringify({ type: "avatar.mode", mode: this.avatarMode }));
      return true;
    } catch {
      return false; // closing: the next channel's open sends it
    }
  }

  // What the tests (and a curious user in the console) read: inbound/outbound audio and the
  // ICE candidate types in use.
  async stats() {
    const out = { inbound: [], outbound: [], localCandidateType: null, remoteCandidateType: null };
    if (!this.pc) return out;
    const report = await this.pc.getStats();
    const byId = new Map();
    report.forEach((s) => byId.set(s.id, s));
    report.forEach((s) => {
      if (s.type === "inbound-rtp") {
        out.inbound.push({ kind: s.kind, ssrc: s.ssrc, packetsReceived: s.packetsReceived || 0,
          audioLevel: s.audioLevel || 0, totalAudioEnergy: s.totalAudioEnergy || 0,
          trackIdentifier: s.trackIdentifier || null, framesDecoded: s.framesDecoded || 0,
          jitterBufferDelay: s.jitterBufferDelay || 0,
          jitterBufferEmittedCount: s.jitterBufferEmittedCount || 0 });
      } else if (s.type === "outbound-rtp") {
        out.outbound.push({ kind: s.kind, packetsSent: s.packetsSent || 0 });
      } else if (s.type === "transport" && s.selectedCandidatePairId) {
        const pair = byId.get(s.selectedCandidatePairId);
        const local = pair && byId.get(pair.localCandidateId);
        const remote = pair && byId.get(pair.remoteCandidateId);
        out.localCandidateType = local ? local.candidateType : null;
        out.remoteCandidateType = remote ? remote.candidateType : null;
      }
    });
    return out;
  }

  // --- signaling --------------------------------------------------------------------------

  _openSocket(resuming) {
    let ws;
    try {
      ws = new WebSocket(wsUrlFor(this.location, this.token));
    } catch (err) {
      this._fail({ code: "unreachable", message: `Cannot open a connection to the server (${err.message}).` });
      return;
    }
    this.ws = ws;
    let opened = false;
    const timer = setTimeout(() => { if (!opened) ws.close(); }, this.connectTimeoutMs);
    ws.onopen = () => {
      opened = true;
      clearTimeout(timer);
      this._everOpened = true;
      if (resuming) this._send({ type: "resume", session: this.session, token: this.token });
      else this._send({ type: "join", room: this.room, display: this.display });
    };
    ws.onmessage = (msg) => { if (ws === this.ws) this._onMessage(msg.data); };
    ws.onclose = (ev) => {
      clearTimeout(timer);
      if (ws !== this.ws) return;
      this._onClose(ev.code, opened);
    };
  }

  _send(message) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ v: 1, ...message }));
    }
  }

  _onClose(code, opened) {
    this._stopPing();
    if (this._ending || this.state === "ended") return;
    const mapped = CLOSE_TO_CODE[code];
    if (mapped === "unknown_session" && this.state === "reconnecting") {
      this._rejoin();
      return;
    }
    if (mapped) {
      this._fail({ code: mapped, message: FINAL_ERRORS[mapped] });
      return;
    }
    if (!this._everOpened) {
      this._fail({ code: "unreachable",
        message: `Cannot reach the customer service server at ${this.location.host}. Check your connection and try again.` });
      return;
    }
    // A dropped socket keeps us in the room for the server's grace period: resume in it.
    const resumable = this.session && (RESUMABLE_CLOSE_CODES.has(code) || !opened);
    if (!resumable) {
      this._end();
      return;
    }
    if (this._droppedAt === null) this._droppedAt = Date.now();
    if (Date.now() - this._droppedAt > this.resumeGraceMs) {
      this._fail({ code: "unreachable", message: "The connection to the server was lost. Please call again." });
      return;
    }
    this._setState("reconnecting");
    const attempt = Math.min(4000, 250 * 2 ** Math.min(4, Math.floor((Date.now() - this._droppedAt) / 1000)));
    setTimeout(() => { if (this.state === "reconnecting") this._openSocket(true); }, attempt);
  }

  async _onMessage(data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return;
    }
    try {
      switch (msg.type) {
        case "joined": await this._onJoined(msg); break;
        case "answer": await this._onAnswer(msg.sdp); break;
        case "offer": await this._onOffer(msg.sdp); break;
        case "candidate": await this._onCandidate(msg.candidate); break;
        case "event": this._onRoomEvent(msg.event); break;
        case "participant_joined":
          this.others = [...(this.others || []).filter((p) => p.id !== msg.participant.id), msg.participant];
          this._emit("participants", { participants: this.others });
          break;
        case "participant_left":
          this.others = (this.others || []).filter((p) => p.id !== msg.participant);
          this._emit("participants", { participants: this.others });
          break;
        case "error": this._onError(msg); break;
        case "bye": this._end(); break;
        default: break;
      }
    } catch (err) {
      this._fail({ code: "webrtc", message: `The call could not be set up: ${err.message}` });
    }
  }

  _onError(msg) {
    if (msg.code === "unknown_session" && this.state === "reconnecting") {
      this._rejoin();
      return;
    }
    if (FINAL_ERRORS[msg.code]) {
      this._fail({ code: msg.code, message: FINAL_ERRORS[msg.code] });
    } else {
      console.warn("kefu signaling error", msg.code, msg.message);
    }
  }

  async _onJoined(msg) {
    this.participant = msg.participant;
    this.others = msg.participants || [];
    this._emit("participants", { participants: this.others });
    this._startPing((msg.heartbeat_s || 10) * 1000);
    if (this.session === msg.session && this.pc) {
      // Resumed: the peer connection never stopped; the server replays what it queued.
      this._droppedAt = null;
      this._setState(this.pc.connectionState === "connected" ? "in-call" : "connecting");
      return;
    }
    this._droppedAt = null;
    this.session = msg.session;
    await this._startPeer(msg.ice_servers || []);
  }

  // The server that held our session is gone (a node of a cluster died, or the grace ran
  // out): join the room again with a new peer connection. The room moves to a live node and
  // its AI carries on from the conversation state kept in Redis. Tried a few times at most.
  _rejoin() {
    if (this._rejoins >= MAX_REJOINS) {
      this._fail({ code: "unknown_session", message: FINAL_ERRORS.unknown_session });
      return;
    }
    this._rejoins += 1;
    const old = this.pc;
    this.pc = null;
    this.channel = null;
    this.avatarChannel = null;
    if (old) {
      old.onconnectionstatechange = null;
      old.close();
    }
    this.session = null;
    this._earlyCandidates = [];
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close(1000);
    this._setState("reconnecting");
    this._emit("rejoin", { attempt: this._rejoins });
    this._openSocket(false);
  }

  async _startPeer(iceServers) {
    const config = { iceServers };
    if (this.relayOnly) config.iceTransportPolicy = "relay";
    const pc = new RTCPeerConnection(config);
    this.pc = pc;
    for (const track of this.mic.getTracks()) pc.addTrack(track, this.mic);
    // No video transceiver of our own: when the room gets video (the avatar, an agent's
    // camera) the server's renegotiation offer adds it and ontrack plays it.
    const events = pc.createDataChannel(EVENTS_CHANNEL);
    this.channel = events;
    events.onopen = () => { if (events === this.channel) this._sendAvatarMode(); };
    events.onmessage = (ev) => {
      try { this._onRoomEvent(JSON.parse(ev.data)); } catch { /* not JSON: not ours */ }
    };
    // The avatar's face weights: a late frame is worth nothing, so no order, no retransmits.
    const avatar = pc.createDataChannel(AVATAR_CHANNEL, { ordered: false, maxRetransmits: 0 });
    avatar.binaryType = "arraybuffer";
    avatar.onmessage = (ev) => {
      if (pc === this.pc && ev.data instanceof ArrayBuffer) this._emit("avatarframe", { data: ev.data });
    };
    this.avatarChannel = avatar;
    pc.onicecandidate = (ev) => {
      this._send({ type: "candidate", candidate: ev.candidate ? ev.candidate.toJSON() : null });
    };
    pc.ontrack = (ev) => this._emit("track", { track: ev.track, streams: ev.streams });
    pc.onconnectionstatechange = () => {
      if (pc !== this.pc) return;
      const s = pc.connectionState;
      if (s === "connected") this._setState("in-call");
      else if (s === "failed") {
        this._fail({ code: "ice_failed", message: this.relayOnly
          ? "No media path through the TURN relay could be found."
          : "No media path to the server could be found (firewall or network problem)." });
      }
    };
    await pc.setLocalDescription(await pc.createOffer());
    this._send({ type: "offer", sdp: pc.localDescription.sdp });
  }

  async _onAnswer(sdp) {
    await this.pc.setRemoteDescription({ type: "answer", sdp });
    await this._flushCandidates();
  }

  async _onOffer(sdp) {
    // kefu keeps the payload types and extmap ids already negotiated (kefu/sfu/stable_ids.py).
    await this.pc.setRemoteDescription({ type: "offer", sdp });
    await this.pc.setLocalDescription(await this.pc.createAnswer());
    this._send({ type: "answer", sdp: this.pc.localDescription.sdp });
    await this._flushCandidates();
  }

  async _onCandidate(candidate) {
    // kefu sends a candidate only after its answer/offer, but messages are handled
    // concurrently here: one may overtake setRemoteDescription, which would refuse it.
    if (!this.pc || !this.pc.remoteDescription) {
      this._earlyCandidates.push(candidate);
      return;
    }
    await this.pc.addIceCandidate(candidate === null ? null : candidate);
  }

  async _flushCandidates() {
    const early = this._earlyCandidates;
    this._earlyCandidates = [];
    for (const c of early) await this.pc.addIceCandidate(c === null ? null : c);
  }

  _onRoomEvent(event) {
    if (!event || typeof event !== "object") return;
    // The same event comes on the data channel and as a signaling message: show it once.
    const key = JSON.stringify(event);
    const i = this._seenEvents.indexOf(key);
    if (i >= 0) {
      this._seenEvents.splice(i, 1);
      return;
    }
    this._seenEvents.push(key);
    if (this._seenEvents.length > 64) this._seenEvents.shift();
    this._emit("roomevent", { event });
  }

  _startPing(intervalMs) {
    this._stopPing();
    this._pingTimer = setInterval(() => this._send({ type: "ping" }), intervalMs);
  }

  _stopPing() {
    if (this._pingTimer !== null) clearInterval(this._pingTimer);
    this._pingTimer = null;
  }

  // --- ending -----------------------------------------------------------------------------

  _fail(error) {
    if (this.state === "ended") return;
    this._emit("error", error);
    this._end();
  }

  _end() {
    if (this.state === "ended") return;
    this._ending = true;
    this._stopPing();
    if (this.ws) this.ws.close(1000);
    if (this.pc) this.pc.close();
    if (this.mic) for (const t of this.mic.getTracks()) t.stop();
    this._setState("ended");
  }

  _setState(state) {
    if (state === this.state) return;
    this.state = state;
    this._emit("state", { state });
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}

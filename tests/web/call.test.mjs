// The caller page's call logic (kefu/web/call.js) against a fake WebSocket and peer
// connection: a dropped socket resumes its session; a session its server lost (a cluster
// node died) joins the room again with a new peer connection; the data channels (kefu-events,
// and kefu-avatar for the avatar's face weights) and the avatar mode the page asks for.
// `node --test tests/web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

class FakeSocket {
  static all = [];
  static OPEN = 1;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.all.push(this);
  }
  send(text) { this.sent.push(JSON.parse(text)); }
  close() { this.readyState = 3; }
  open() { this.readyState = 1; this.onopen(); }
  receive(message) { this.onmessage({ data: JSON.stringify(message) }); }
  drop(code) { this.readyState = 3; this.onclose({ code }); }
  types() { return this.sent.map((m) => m.type); }
}

class FakeChannel {
  constructor(label, options) {
    this.label = label;
    this.options = options;
    this.readyState = "connecting";
    this.binaryType = "blob";
    this.sent = [];
  }
  send(text) {
    if (this.readyState !== "open") throw new Error("InvalidStateError");
    this.sent.push(JSON.parse(text));
  }
  open() { this.readyState = "open"; if (this.onopen) this.onopen(); }
  receive(data) { this.onmessage({ data }); }
}

class FakePeer {
  static all = [];
  constructor(config) {
    this.config = config;
    this.closed = false;
    this.connectionState = "new";
    this.localDescription = null;
    this.channels = [];
    FakePeer.all.push(this);
  }
  addTrack() {}
  createDataChannel(label, options) {
    const channel = new FakeChannel(label, options);
    this.channels.push(channel);
    return channel;
  }
  channel(label) { return this.channels.find((c) => c.label === label); }
  async createOffer() { return { type: "offer", sdp: `v=0 offer ${FakePeer.all.length}` }; }
  async setLocalDescription(d) { this.localDescription = d; }
  close() { this.closed = true; }
}

globalThis.WebSocket = FakeSocket;
globalThis.RTCPeerConnection = FakePeer;
Object.defineProperty(globalThis, "navigator", {
  value: { mediaDevices: { getUserMedia: async () => ({ getTracks: () => [], getAudioTracks: () => [] }) } },
  configurable: true,
});

const source = readFileSync(new URL("../../kefu/web/call.js", import.meta.url), "utf8");
const { KefuCall } = await import(`data:text/javascript;charset=utf-8,${encodeURIComponent(source)}`);

const tick = (ms = 0) => new Promise((resolve) => setTimeout(resolve, ms));
const last = () => FakeSocket.all[FakeSocket.all.length - 1];

async function joinedCall(options = {}) {
  FakeSocket.all = [];
  FakePeer.all = [];
  const call = new KefuCall({ token: "tok", room: "lobby", location: { protocol: "http:", host: "kefu:8080" },
    ...options });
  const seen = { states: [], errors: [], rejoins: [] };
  call.addEventListener("state", (e) => seen.states.push(e.detail.state));
  call.addEventListener("error", (e) => seen.errors.push(e.detail.code));
  call.addEventListener("rejoin", (e) => seen.rejoins.push(e.detail.attempt));
  await call.start();
  last().open();
  last().receive({ type: "joined", session: "s1", participant: "p1", participants: [], heartbeat_s: 60 });
  await tick();
  return { call, seen };
}

async function dropAndResume() {
  last().drop(1006);
  await tick(300); // the first retry comes 250 ms after the drop
  last().open();
}

test("a dropped socket resumes the same session on the same peer connection", async () => {
  const { call, seen } = await joinedCall();
  const [pc] = FakePeer.all;
  await dropAndResume();
  assert.deepEqual(last().sent[0], { v: 1, type: "resume", session: "s1", token: "tok" });
  last().receive({ type: "joined", session: "s1", participant: "p1", participants: [], heartbeat_s: 60 });
  await tick();
  assert.equal(FakePeer.all.length, 1);
  assert.equal(pc.closed, false);
  assert.equal(seen.rejoins.length, 0);
  call.hangUp();
});

test("a session its server lost joins the room again with a new peer connection", async () => {
  const { call, seen } = await joinedCall();
  const [first] = FakePeer.all;
  await dropAndResume();
  const resumeSocket = last();
  resumeSocket.receive({ type: "error", code: "unknown_session", message: "session cannot be resumed" });
  assert.equal(first.closed, true);
  assert.deepEqual(seen.rejoins, [1]);
  resumeSocket.drop(4410); // the server closes the refused socket: nothing more happens
  assert.equal(call.state, "reconnecting");
  const joinSocket = last();
  assert.notEqual(joinSocket, resumeSocket);
  joinSocket.open();
  assert.deepEqual(joinSocket.sent[0], { v: 1, type: "join", room: "lobby", display: "" });
  joinSocket.receive({ type: "joined", session: "s2", participant: "p2", participants: [], heartbeat_s: 60 });
  await tick();
  assert.equal(FakePeer.all.length, 2);
  assert.equal(call.session, "s2");
  assert.deepEqual(joinSocket.types(), ["join", "offer"]);
  // The old connection failing late does not end the new call.
  first.connectionState = "failed";
  if (first.onconnectionstatechange) first.onconnectionstatechange();
  assert.deepEqual(seen.errors, []);
  assert.notEqual(call.state, "ended");
  call.hangUp();
});

test("the close code 4410 while reconnecting also joins again", async () => {
  const { call, seen } = await joinedCall();
  await dropAndResume();
  last().drop(4410);
  assert.deepEqual(seen.rejoins, [1]);
  last().open();
  assert.equal(last().sent[0].type, "join");
  call.hangUp();
});

test("a call joins again three times at most, then ends with a readable error", async () => {
  const { call, seen } = await joinedCall();
  for (let attempt = 1; attempt <= 4; attempt += 1) {
    await dropAndResume();
    last().receive({ type: "error", code: "unknown_session", message: "gone" });
    if (attempt <= 3) {
      last().open();
      last().receive({ type: "joined", session: `s${attempt + 1}`, participant: "p", participants: [], heartbeat_s: 60 });
      await tick();
    }
  }
  assert.deepEqual(seen.rejoins, [1, 2, 3]);
  assert.deepEqual(seen.errors, ["unknown_session"]);
  assert.equal(call.state, "ended");
});

test("unknown_session outside a reconnect is final, as before", async () => {
  const { call, seen } = await joinedCall();
  last().receive({ type: "error", code: "unknown_session", message: "gone" });
  assert.deepEqual(seen.errors, ["unknown_session"]);
  assert.equal(call.state, "ended");
  assert.deepEqual(seen.rejoins, []);
});

test("the page opens kefu-avatar unordered without retransmits, next to kefu-events", async () => {
  const { call } = await joinedCall();
  const [pc] = FakePeer.all;
  assert.deepEqual(pc.channels.map((c) => c.label), ["kefu-events", "kefu-avatar"]);
  const avatar = pc.channel("kefu-avatar");
  assert.deepEqual(avatar.options, { ordered: false, maxRetransmits: 0 });
  assert.equal(avatar.binaryType, "arraybuffer");
  assert.equal(pc.channel("kefu-events").options, undefined); // reliable and ordered, as before
  assert.equal(call.avatarChannel, avatar);
  // Its binary messages come out as avatarframe events; anything else is not a frame.
  const frames = [];
  call.addEventListener("avatarframe", (e) => frames.push(e.detail.data));
  avatar.open();
  const frame = new Uint8Array(60).fill(7).buffer;
  avatar.receive(frame);
  avatar.receive("not binary");
  assert.deepEqual(frames, [frame]);
  assert.deepEqual(avatar.sent, []); // the page never sends on it
  call.hangUp();
});

test("the avatar mode goes to the server when kefu-events opens and on every change", async () => {
  const { call } = await joinedCall();
  const events = FakePeer.all[0].channel("kefu-events");
  call.setAvatarMode("weights"); // not open yet: nothing sent, the choice is kept
  assert.deepEqual(events.sent, []);
  events.open();
  assert.deepEqual(events.sent, [{ type: "avatar.mode", mode: "weights" }]);
  call.setAvatarMode("video");
  call.setAvatarMode("off");
  assert.deepEqual(events.sent.slice(1), [{ type: "avatar.mode", mode: "video" }, { type: "avatar.mode", mode: "off" }]);
  assert.throws(() => call.setAvatarMode("hologram"), TypeError);
  assert.equal(call.avatarMode, "off");
  // Room events still arrive on the same channel.
  const seen = [];
  call.addEventListener("roomevent", (e) => seen.push(e.detail.event));
  events.receive(JSON.stringify({ type: "transcript.final", speaker: "bot", text: "hi" }));
  assert.deepEqual(seen, [{ type: "transcript.final", speaker: "bot", text: "hi" }]);
  call.hangUp();
  call.setAvatarMode("weights"); // after the call: no throw
});

test("the initial avatar mode comes from the options and survives joining again", async () => {
  const { call } = await joinedCall({ avatarMode: "weights" });
  const first = FakePeer.all[0].channel("kefu-events");
  first.open();
  assert.deepEqual(first.sent, [{ type: "avatar.mode", mode: "weights" }]);
  call.setAvatarMode("off");
  await dropAndResume();
  last().receive({ type: "error", code: "unknown_session", message: "gone" });
  last().open();
  last().receive({ type: "joined", session: "s2", participant: "p2", participants: [], heartbeat_s: 60 });
  await tick();
  assert.equal(FakePeer.all.length, 2);
  const second = FakePeer.all[1].channel("kefu-events");
  assert.equal(call.channel, second);
  assert.equal(call.avatarChannel, FakePeer.all[1].channel("kefu-avatar"));
  second.open();
  assert.deepEqual(second.sent, [{ type: "avatar.mode", mode: "off" }]);
  // The old peer's channels opening late send nothing and deliver no frames.
  const frames = [];
  call.addEventListener("avatarframe", (e) => frames.push(e.detail.data));
  first.sent.length = 0;
  first.readyState = "connecting";
  first.open();
  assert.deepEqual(first.sent, []);
  FakePeer.all[0].channel("kefu-avatar").receive(new ArrayBuffer(60));
  assert.deepEqual(frames, []);
  call.hangUp();
});

test("an unknown avatar mode in the options falls back to video", async () => {
  const { call } = await joinedCall({ avatarMode: "3d" });
  assert.equal(call.avatarMode, "video");
  const events = FakePeer.all[0].channel("kefu-events");
  events.open();
  assert.deepEqual(events.sent, [{ type: "avatar.mode", mode: "video" }]);
  call.hangUp();
});

// The agent workbench's pure logic (kefu/web/workbench.js): `node --test tests/web/`.
//
// workbench.js is a browser ES module in a package without "type": "module"; it is loaded
// from a data: URL so that every Node version takes it as a module (it imports nothing).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const source = readFileSync(new URL("../../kefu/web/workbench.js", import.meta.url), "utf8");
const wb = await import(`data:text/javascript;charset=utf-8,${encodeURIComponent(source)}`);
const { CallBook, ClockSkew, PASS_ON_ACTION, agentNameProblem, allowedActions, apiErrorText, assignedToMe,
  callDuration, callerDisplay, decodeJwtPayload, describeToken, formatDuration, passedLineText,
  passedToYouText, stateLabel, transferStatusText } = wb;

function jwt(claims) {
  const b64 = (obj) => Buffer.from(JSON.stringify(obj)).toString("base64url");
  return `${b64({ alg: "HS256", typ: "JWT" })}.${b64(claims)}.c2lnbmF0dXJl`;
}

const summary = (over = {}) => ({
  call_id: "c1", state: "ai_active", channel: "sip", source: "udp:192.0.2.7:5060",
  caller: "sip:alice@example.com", created: 1000, answered: 1001, codec: "PCMU", rtp: null,
  room: null, owner: null, ...over,
});

test("tokens: staff tokens pass, customer and broken ones explain why", () => {
  const agent = describeToken(jwt({ sub: "bob", role: "agent", exp: 2000 }), 1000);
  assert.equal(agent.ok, true);
  assert.equal(agent.sub, "bob");
  assert.equal(agent.role, "agent");
  assert.equal(describeToken(jwt({ sub: "sue", role: "supervisor", exp: 2000 }), 1000).ok, true);

  const customer = describeToken(jwt({ sub: "alice", role: "customer", exp: 2000 }), 1000);
  assert.equal(customer.ok, false);
  assert.equal(customer.problem, "customer");
  assert.match(customer.message, /customer token/);

  assert.equal(describeToken(jwt({ sub: "bob", role: "agent", exp: 10 }), 1000).problem, "expired");
  assert.equal(describeToken(jwt({ sub: "x", role: "root" }), 1000).problem, "role");
  assert.equal(describeToken("not a token", 1000).problem, "malformed");
  assert.equal(describeToken("a.!!!.c", 1000).problem, "malformed");
  // UTF-8 names survive the base64url decoding.
  assert.equal(decodeJwtPayload(jwt({ sub: "客服小王", role: "agent" })).sub, "客服小王");
});

test("labels and durations", () => {
  assert.equal(stateLabel({ state: "ai_active" }), "AI");
  assert.equal(stateLabel({ state: "human_active", owner: "bob" }), "Human (bob)");
  assert.equal(stateLabel({ state: "transferring" }), "Transferring");
  assert.equal(stateLabel({ state: "ringing" }), "Ringing");
  assert.equal(stateLabel({ state: "ai_active", waiting_since: 100 }), "Waiting for an agent");
  assert.equal(stateLabel({ state: "ai_active", ended: { reason: "bye" } }), "Ended");
  assert.equal(formatDuration(0), "0:00");
  assert.equal(formatDuration(65.9), "1:05");
  assert.equal(formatDuration(3725), "1:02:05");
  assert.equal(formatDuration(-3), "0:00");
  assert.equal(callDuration({ created: 100, answered: 110 }, 130), 20);
  assert.equal(callDuration({ created: 100, answered: null }, 130), 30);
  assert.equal(callDuration({ created: 100, answered: 110, ended: { at: 115 } }, 130), 5);
  assert.equal(callerDisplay('"Alice \\"A\\"" <sip:alice@example.com>;tag=9'), 'Alice "A"');
  assert.equal(callerDisplay("Bob <sip:bob@example.com>"), "Bob");
  assert.equal(callerDisplay("<sip:+4930123@trunk.example;user=phone>;tag=x"), "+4930123@trunk.example");
  assert.equal(callerDisplay("sip:carol@example.com"), "carol@example.com");
  assert.equal(callerDisplay(""), "");
  assert.equal(transferStatusText(180), "180 ringing");
  assert.equal(transferStatusText(200), "200 transferred");
  assert.equal(transferStatusText(486), "486 failed");
});

test("API errors read as sentences; a takeover conflict names the owner", () => {
  const conflict = { error: { code: "wrong_state", state: "human_active", owner: "carol", message: "x" } };
  assert.equal(apiErrorText("Taking over", 409, conflict, "bob"), "Already taken by carol.");
  assert.equal(apiErrorText("Taking over", 409, conflict, "carol"), "You already hold this call.");
  assert.match(apiErrorText("Handing back", 409, { error: { code: "wrong_state", state: "ai_active" } }),
    /while the call is AI/);
  assert.match(apiErrorText("x", 401, { error: { code: "unauthorized" } }), /invalid or has expired/);
  assert.match(apiErrorText("x", 403, { error: { code: "forbidden" } }), /customer tokens cannot/);
  assert.match(apiErrorText("Transferring", 403, { error: { code: "target_not_allowed" } }), /allow-list/);
  assert.match(apiErrorText("x", 404, null), /HTTP 404/);
  assert.match(apiErrorText("Listening in", 0, null), /cannot be reached/);
});

test("what each state allows", () => {
  const ctx = { user: "bob", role: "agent", media: null, busy: null };
  const ai = allowedActions({ call_id: "c1", state: "ai_active" }, ctx);
  assert.deepEqual(ai, { listen: true, takeover: true, handback: false, transfer: true, passOn: false,
    hangup: true, leave: false });

  const mine = allowedActions({ call_id: "c1", state: "human_active", owner: "bob" },
    { ...ctx, media: { callId: "c1", state: "in-call" } });
  assert.deepEqual(mine, { listen: false, takeover: false, handback: true, transfer: true, passOn: true,
    hangup: true, leave: true });

  const theirs = allowedActions({ call_id: "c1", state: "human_active", owner: "carol" }, ctx);
  assert.equal(theirs.handback, false);
  assert.equal(theirs.takeover, false);
  assert.equal(theirs.listen, true);
  assert.equal(theirs.hangup, false);
  assert.equal(allowedActions({ call_id: "c1", state: "human_active", owner: "carol" },
    { ...ctx, role: "supervisor" }).handback, true);

  const ringing = allowedActions({ call_id: "c1", state: "ringing" }, ctx);
  assert.equal(ringing.listen, false);
  assert.equal(ringing.takeover, false);
  assert.equal(ringing.hangup, true);

  const ended = allowedActions({ call_id: "c1", state: "ended", ended: { reason: "bye" } }, ctx);
  assert.equal(Object.values(ended).some(Boolean), false);
  const busy = allowedActions({ call_id: "c1", state: "ai_active" }, { ...ctx, busy: "taking over" });
  assert.equal(busy.takeover || busy.hangup || busy.listen, false);
});

test("snapshots add calls and end the ones that disappear", () => {
  const book = new CallBook();
  let r = book.applySnapshot([summary(), summary({ call_id: "c2", state: "ringing", answered: null })], 1010);
  assert.deepEqual(r.added, ["c1", "c2"]);
  assert.equal(book.get("c1").caller, "sip:alice@example.com");
  r = book.applySnapshot([summary({ state: "human_active", owner: "bob" })], 1020);
  assert.deepEqual(r.ended, ["c2"]);
  assert.equal(book.get("c2").ended.reason, "gone");
  assert.equal(stateLabel(book.get("c1")), "Human (bob)");
  // Ended calls linger, then leave; the selected one stays.
  assert.deepEqual(book.prune(1025), []);
  assert.deepEqual(book.prune(1031, "c2"), []);
  assert.deepEqual(book.prune(1031), ["c2"]);
  assert.deepEqual(book.list().map((c) => c.call_id), ["c1"]);
});

test("a state an event set after the snapshot was requested wins over the snapshot", () => {
  const book = new CallBook();
  book.applySnapshot([summary()], 1010);
  book.applyEvent({ v: 1, type: "call.state_changed", call_id: "c1", at: 1012, old: "ai_active",
    new: "human_active", reason: "taken over by bob" }, 1012);
  assert.equal(stateLabel(book.get("c1")), "Human (bob)");
  book.applySnapshot([summary({ state: "ai_active" })], 1013, 1011); // requested before the event
  assert.equal(book.get("c1").state, "human_active");
  book.applySnapshot([summary({ state: "human_active", owner: "bob" })], 1015, 1014);
  assert.equal(book.get("c1").owner, "bob");
});

test("events build the transcript, the co-pilot, intents and alerts", () => {
  const book = new CallBook();
  const ev = (type, at, fields) => book.applyEvent({ v: 1, type, call_id: "c9", at, ...fields }, at);
  let r = ev("call.started", 100, { kind: "sip", source: "udp:192.0.2.7:5060" });
  assert.equal(r.created, true);
  assert.equal(book.get("c9").state, "ringing");
  ev("call.state_changed", 100.5, { old: "ringing", new: "ai_active", reason: "answered" });
  assert.equal(book.get("c9").answered, 100.5);
  ev("transcript.final", 101, { turn_id: 0, speaker: "bot", text: "Hello, how can I help?", lang: "en" });
  ev("transcript.final", 105, { turn_id: 1, speaker: "caller", text: "where is my order", lang: "en" });
  ev("transcript.final", 105.6, { turn_id: 1, speaker: "bot", text: "It ships within two days.", lang: "en" });
  ev("turn.trace", 105.8, { turn_id: 1, transcript: "where is my order", intent: "order_status",
    source: "kb", answer_text: "It ships within two days.", barge_in: false, lang: "en" });
  const call = book.get("c9");
  assert.equal(call.lastIntent, "order_status");
  const speech = call.lines.filter((l) => l.kind === "speech");
  assert.deepEqual(speech.map((l) => [l.speaker, l.text]), [
    ["bot", "Hello, how can I help?"], ["caller", "where is my order"], ["bot", "It ships within two days."]]);
  assert.equal(speech[2].source, "kb");          // the trace annotates the bot's answer of its turn
  assert.equal(speech[2].intent, "order_status");
  assert.equal(speech[0].source, undefined);
  assert.deepEqual(call.copilot.map((t) => t.answer_text), ["It ships within two days."]);

  // A trace that comes before the bot's line annotates it on arrival.
  ev("turn.trace", 110, { turn_id: 2, transcript: "refund", intent: "refund", source: "llm", answer_text: "Sure." });
  ev("transcript.final", 110.1, { turn_id: 2, speaker: "bot", text: "Sure." });
  assert.equal(call.lines.at(-1).source, "llm");

  ev("handoff.requested", 111, { reason: "caller asked", detail: "handoff" });
  assert.equal(call.alert.reason, "caller asked");
  assert.match(call.lines.at(-1).text, /caller asked for a human/);
  ev("call.state_changed", 112, { old: "ai_active", new: "human_active", reason: "taken over by dana" });
  assert.equal(call.alert, null);
  assert.equal(call.owner, "dana");
  ev("call.transfer_progress", 113, { target: "sip:queue@vcc.example", status: 180 });
  assert.match(call.lines.at(-1).text, /sip:queue@vcc.example: 180 ringing/);
  r = ev("call.ended", 115, { reason: "bye", answered: true });
  assert.equal(r.ended, true);
  assert.equal(call.state, "ended");
  assert.equal(callDuration(call, 200), 115 - 100.5);
  // Unknown event types and events for an ended call do not throw.
  ev("transcript.partial", 116, { turn_id: 3, speaker: "caller", text: "he" });
  ev("call.state_changed", 117, { old: "ended", new: "ai_active" });
  assert.equal(call.state, "ended");
});

test("events.dropped counts and notes the gap in every live call", () => {
  const book = new CallBook();
  book.applySnapshot([summary(), summary({ call_id: "c2" })], 1000);
  const r = book.applyEvent({ v: 1, type: "events.dropped", count: 117, at: 1001 }, 1001);
  assert.equal(r.dropped, 117);
  assert.equal(book.dropped, 117);
  for (const id of ["c1", "c2"]) assert.equal(book.get(id).lines.at(-1).text, "117 events missed");
  assert.equal(book.applyEvent({ v: 1, type: "events.subscribed", call_ids: null }, 1002), null);
});

test("an event-only call (a browser caller's room) becomes active with its first turn", () => {
  const book = new CallBook();
  book.applyEvent({ v: 1, type: "call.started", call_id: "room:web-1", at: 50, kind: "webrtc", source: "web-1" }, 50);
  book.applyEvent({ v: 1, type: "transcript.final", call_id: "room:web-1", at: 52, turn_id: 1, speaker: "caller", text: "hi" }, 52);
  const call = book.get("room:web-1");
  assert.equal(call.state, "ai_active");
  assert.equal(call.channel, "webrtc");
  // Not in the API's list: a snapshot does not end it, silence for staleS prunes it.
  book.applySnapshot([], 60);
  assert.equal(call.ended, null);
  assert.deepEqual(book.prune(60 + 901), ["room:web-1"]);
});

test("the transcript is bounded", () => {
  const book = new CallBook({ maxLines: 10 });
  for (let i = 0; i < 25; i++) {
    book.applyEvent({ v: 1, type: "transcript.final", call_id: "c1", at: i, turn_id: i, speaker: "caller", text: `t${i}` }, i);
  }
  const lines = book.get("c1").lines;
  assert.equal(lines.length, 10);
  assert.equal(lines.at(-1).text, "t24");
  assert.equal(new Set(lines.map((l) => l.key)).size, 10);
});

test("the clock skew takes the least-delayed sample", () => {
  const skew = new ClockSkew(4);
  skew.sample(1005.0, 1000.3); // 0.3 s in flight
  skew.sample(1010.0, 1005.05);
  assert.ok(Math.abs(skew.offset - 4.95) < 1e-9);
  assert.ok(Math.abs(skew.now(2000) - 2004.95) < 1e-9);
});

test("calls waiting for an agent come first, longest wait first, and leave the queue", () => {
  const book = new CallBook();
  const summary = (id, created, waiting) => ({ call_id: id, state: "ai_active", created, answered: created, waiting_since: waiting });
  book.applySnapshot([summary("a", 100, null), summary("b", 101, 130), summary("c", 102, 120)], 140);
  assert.deepEqual(book.list().map((c) => c.call_id), ["c", "b", "a"]);
  book.applyEvent({ v: 1, type: "call.agent_wait", call_id: "a", at: 141, waiting: true, reason: "caller asked", position: 3, outcome: "" }, 141);
  assert.deepEqual(book.list().map((c) => c.call_id), ["c", "b", "a"]);
  book.applyEvent({ v: 1, type: "call.agent_wait", call_id: "c", at: 142, waiting: false, reason: "caller asked", position: 0, outcome: "taken" }, 142);
  assert.deepEqual(book.list().map((c) => c.call_id), ["b", "a", "c"]);
  assert.equal(stateLabel(book.get("b")), "Waiting for an agent");
});

test("call.assigned gives the call a new owner, says so, and marks it for that owner", () => {
  const book = new CallBook();
  book.applySnapshot([summary({ call_id: "room:support-7", channel: "webrtc", state: "human_active", owner: "ann" })], 1000);
  const r = book.applyEvent({ v: 1, type: "call.assigned", call_id: "room:support-7", at: 1005,
    old: "ann", new: "bob", by: "ann" }, 1005);
  const call = book.get("room:support-7");
  assert.deepEqual(r.assigned, { old: "ann", new: "bob", by: "ann", at: 1005 });
  assert.equal(r.stateChanged, false);
  assert.equal(call.state, "human_active");
  assert.equal(call.owner, "bob");
  assert.equal(stateLabel(call), "Human (bob)");
  assert.equal(call.lines.at(-1).kind, "system");
  assert.equal(call.lines.at(-1).text, "ann passed the call to bob");
  assert.equal(call.alert, null);
  // Only the new owner's workbench shows it as theirs to join.
  assert.equal(assignedToMe(call, "bob"), true);
  assert.equal(assignedToMe(call, "ann"), false);
  assert.equal(assignedToMe(call, null), false);
  // A list requested before the event does not give the call back to ann.
  book.applySnapshot([summary({ call_id: "room:support-7", channel: "webrtc", state: "human_active", owner: "ann" })], 1006, 1004);
  assert.equal(call.owner, "bob");
  assert.equal(assignedToMe(call, "bob"), true);
  // bob's takeover (accepted by the server) takes the call up: no longer marked.
  book.setState("room:support-7", "human_active", "bob", 1007);
  assert.equal(assignedToMe(call, "bob"), false);
  assert.equal(call.assigned, null);

  // A supervisor passes bob's call on: the line names all three.
  book.applyEvent({ v: 1, type: "call.assigned", call_id: "room:support-7", at: 1010, old: "bob", new: "carol", by: "lee" }, 1010);
  assert.equal(call.lines.at(-1).text, "lee passed the call from bob to carol");
  assert.equal(call.owner, "carol");
  assert.equal(assignedToMe(call, "carol"), true);
  assert.equal(assignedToMe(call, "bob"), false);
  // Handed back to the AI before carol came: nothing is hers to join any more.
  book.applyEvent({ v: 1, type: "call.state_changed", call_id: "room:support-7", at: 1012, old: "human_active",
    new: "ai_active", reason: "handed back by lee" }, 1012);
  assert.equal(call.owner, null);
  assert.equal(call.assigned, null);
  assert.equal(assignedToMe(call, "carol"), false);
});

test("call.assigned for an ended call, or without a new owner, changes nothing", () => {
  const book = new CallBook();
  book.applySnapshot([summary({ state: "human_active", owner: "ann" })], 1000);
  book.applyEvent({ v: 1, type: "call.assigned", call_id: "c1", at: 1001, old: "ann", by: "ann" }, 1001);
  assert.equal(book.get("c1").owner, "ann");
  assert.equal(book.get("c1").assigned, null);
  book.applyEvent({ v: 1, type: "call.ended", call_id: "c1", at: 1002, reason: "bye", answered: true }, 1002);
  const lines = book.get("c1").lines.length;
  const r = book.applyEvent({ v: 1, type: "call.assigned", call_id: "c1", at: 1003, old: "ann", new: "bob", by: "ann" }, 1003);
  assert.equal(r.assigned, null);
  assert.equal(book.get("c1").owner, "ann");
  assert.equal(book.get("c1").lines.length, lines);
  assert.equal(assignedToMe(book.get("c1"), "bob"), false);
});

test("the texts of a pass-on", () => {
  assert.equal(passedLineText({ old: "ann", new: "bob", by: "ann" }), "ann passed the call to bob");
  assert.equal(passedLineText({ old: "ann", new: "bob", by: "lee" }), "lee passed the call from ann to bob");
  assert.equal(passedLineText({ old: null, new: "bob", by: null }), "The call was passed to bob");
  assert.equal(passedToYouText({ old: "ann", new: "bob", by: "ann" }, "Alice"),
    "ann passed you the call from Alice: take it over to join.");
  assert.equal(passedToYouText({ old: "ann", new: "bob", by: "lee" }),
    "lee passed you ann's call: take it over to join.");
});

test("a call passed to an agent: they may take it over; only its holder or a supervisor passes it on", () => {
  const call = { call_id: "room:support-7", state: "human_active", owner: "bob" };
  const bob = { user: "bob", role: "agent", media: null, busy: null };
  // bob, not in the call's audio yet: taking it over joins it.
  assert.deepEqual(allowedActions(call, bob), { listen: true, takeover: true, handback: true, transfer: true,
    passOn: true, hangup: true, leave: false });
  // Listening with the microphone off: taking over still opens it; talking already: not again.
  const listening = allowedActions(call, { ...bob, media: { callId: "room:support-7", state: "in-call", mic: false } });
  assert.equal(listening.takeover, true);
  assert.equal(listening.listen, false);
  assert.equal(listening.leave, true);
  const talking = allowedActions(call, { ...bob, media: { callId: "room:support-7", state: "in-call", mic: true } });
  assert.equal(talking.takeover, false);
  assert.equal(talking.passOn, true);
  // Audio of another call does not count as being in this one.
  assert.equal(allowedActions(call, { ...bob, media: { callId: "c2", state: "in-call", mic: true } }).takeover, true);

  // Another agent neither takes it nor passes it on.
  const carol = allowedActions(call, { ...bob, user: "carol" });
  assert.deepEqual(carol, { listen: true, takeover: false, handback: false, transfer: false, passOn: false,
    hangup: false, leave: false });
  // A supervisor or admin passes it on (but does not take a call someone holds).
  for (const role of ["supervisor", "admin"]) {
    const lead = allowedActions(call, { ...bob, user: "lee", role });
    assert.equal(lead.passOn, true, role);
    assert.equal(lead.takeover, false, role);
  }
  // Only a call a person holds passes on; not while busy or ended.
  assert.equal(allowedActions({ call_id: "c1", state: "ai_active" }, { ...bob, role: "supervisor" }).passOn, false);
  assert.equal(allowedActions({ call_id: "c1", state: "transferring", owner: "bob" }, bob).passOn, false);
  assert.equal(allowedActions({ call_id: "c1", state: "human_active", owner: null }, bob).passOn, false);
  assert.equal(allowedActions(call, { ...bob, busy: "passing the call on" }).passOn, false);
  assert.equal(allowedActions({ ...call, ended: { reason: "bye" } }, bob).passOn, false);
});

test("a refused pass-on reads as a sentence; names are checked before asking", () => {
  assert.equal(PASS_ON_ACTION, "Passing the call on");
  assert.equal(apiErrorText(PASS_ON_ACTION, 409, { error: { code: "wrong_state", state: "human_active", owner: "carol" } }, "bob"),
    "The call is held by carol: only its holder or a supervisor can pass it on.");
  assert.equal(apiErrorText(PASS_ON_ACTION, 409, { error: { code: "wrong_state", state: "ai_active", owner: null } }, "bob"),
    "The AI has this call: take it over before passing it on.");
  assert.equal(apiErrorText(PASS_ON_ACTION, 409, { error: { code: "wrong_state", state: "transferring" } }, "bob"),
    "The call cannot be passed on while it is Transferring.");
  assert.equal(apiErrorText(PASS_ON_ACTION, 400, { error: { code: "bad_request", message: "an agent's name is 1-128 printable characters" } }, "bob"),
    "That is not a valid agent name: enter the colleague's user name (1 to 128 printable characters).");
  assert.equal(apiErrorText(PASS_ON_ACTION, 404, { error: { code: "unknown_call" } }, "bob"), "That call does not exist any more.");
  // Other actions keep their texts.
  assert.equal(apiErrorText("Taking over", 409, { error: { code: "wrong_state", state: "human_active", owner: "carol" } }, "bob"),
    "Already taken by carol.");
  assert.equal(apiErrorText("Transferring", 400, { error: { code: "bad_request", message: "x" } }),
    "Transferring failed: the server did not understand the request: x.");

  assert.equal(agentNameProblem("  ", {}), "Enter the user name of the colleague to pass the call to.");
  assert.equal(agentNameProblem(undefined), "Enter the user name of the colleague to pass the call to.");
  assert.equal(agentNameProblem("x".repeat(129)), "A user name has at most 128 characters.");
  assert.equal(agentNameProblem("客".repeat(128)), null);
  assert.equal(agentNameProblem("bo\u0007b"), "That is not a valid user name: it contains characters that cannot be printed.");
  assert.equal(agentNameProblem("li\u00a0wei"), "That is not a valid user name: it contains characters that cannot be printed.");
  assert.equal(agentNameProblem(" li wei "), null);
  assert.equal(agentNameProblem("bob", { owner: "bob", me: "bob" }), "You already hold this call: enter a colleague's user name.");
  assert.equal(agentNameProblem("ann", { owner: "ann", me: "lee" }), "ann already holds this call.");
  assert.equal(agentNameProblem("carol", { owner: "ann", me: "ann" }), null);
});

// The agent workbench's logic, without DOM or network: the call list built from
// `GET /api/calls` snapshots and `/api/events` messages (docs/events.md), what each call's
// state allows, and the texts the page shows. agent.js draws it; tests/web/workbench.test.mjs
// runs it under `node --test`.
//
// Times are UNIX seconds on the server's clock (the page estimates its offset with ClockSkew).

export const STAFF_ROLES = new Set(["agent", "supervisor", "admin"]);

const STATE_LABELS = {
  ringing: "Ringing",
  dialing: "Dialing",
  ai_active: "AI",
  human_active: "Human",
  transferring: "Transferring",
  ended: "Ended",
};

const SOURCE_LABELS = {
  kb: "knowledge base",
  llm: "LLM",
  fallback: "fallback",
  handoff: "handoff",
  clarify: "clarifying question",
  greeting: "greeting",
};

const LIVE_MEDIA = new Set(["connecting", "in-call", "reconnecting"]);

/** The `action` apiErrorText() gets for a refused pass-on (transfer {"agent": ...}). */
export const PASS_ON_ACTION = "Passing the call on";

/** Longest agent name the server accepts (kefu/mediaserver/assign.py). */
export const MAX_AGENT_NAME = 128;

// --- tokens ---------------------------------------------------------------------------------

/** The JWT's payload (claims), decoded WITHOUT checking the signature: for display only. */
export function decodeJwtPayload(token) {
  if (typeof token !== "string") return null;
  const parts = token.trim().split(".");
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    let b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    while (b64.length % 4) b64 += "=";
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const payload = JSON.parse(new TextDecoder().decode(bytes));
    return payload && typeof payload === "object" && !Array.isArray(payload) ? payload : null;
  } catch {
    return null;
  }
}

/**
 * Who a token says it is, and whether the workbench can use it:
 * {ok, sub, role, exp, problem: null | "malformed" | "customer" | "role" | "expired", message}.
 */
export function describeToken(token, nowS) {
  const claims = decodeJwtPayload(token);
  if (!claims) {
    return { ok: false, sub: null, role: null, exp: null, problem: "malformed",
      message: "That is not a token (a JWT looks like xxxxx.yyyyy.zzzzz). Paste the whole token." };
  }
  const sub = typeof claims.sub === "string" ? claims.sub : null;
  const role = typeof claims.role === "string" ? claims.role : null;
  const exp = typeof claims.exp === "number" ? claims.exp : null;
  const base = { sub, role, exp };
  if (role === "customer") {
    return { ...base, ok: false, problem: "customer",
      message: "This is a customer token. The workbench needs an agent or supervisor token." };
  }
  if (!STAFF_ROLES.has(role)) {
    return { ...base, ok: false, problem: "role",
      message: `This token's role (${role || "none"}) may not use the workbench: an agent or supervisor token is needed.` };
  }
  if (exp !== null && typeof nowS === "number" && exp < nowS) {
    return { ...base, ok: false, problem: "expired",
      message: "This token has expired. Ask for a new one." };
  }
  return { ...base, ok: true, problem: null, message: "" };
}

// --- texts ----------------------------------------------------------------------------------

/** "AI", "Human (bob)", "Transferring", "Waiting", "Ended", ... */
export function stateLabel(call) {
  if (!call) return "";
  if (call.ended || call.state === "ended") return "Ended";
  if (!call.state) return "Unknown";
  const label = STATE_LABELS[call.state] || call.state;
  if (call.state === "human_active" && call.owner) return `${label} (${call.owner})`;
  if (call.state === "ai_active" && call.waiting_since) return "Waiting for an agent";
  return label;
}

/** A From header/URI for people: the display name if it has one, else the URI without its
 *  scheme, brackets and parameters ('"Alice" <sip:alice@example.com>;tag=1' -> "Alice"). */
export function callerDisplay(caller) {
  if (typeof caller !== "string") return "";
  const text = caller.trim();
  if (!text) return "";
  const named = /^\s*"((?:[^"\\]|\\.)*)"\s*</.exec(text) || /^([^<"]+?)\s*</.exec(text);
  if (named && named[1].trim()) return named[1].replace(/\\(.)/g, "$1").trim();
  const uri = /<([^>]*)>/.exec(text);
  let u = uri ? uri[1] : text;
  u = u.replace(/^(sips?|tel):/i, "").split(";")[0].split("?")[0];
  return u || text;
}

export function sourceLabel(source) {
  if (!source) return "unknown source";
  return SOURCE_LABELS[source] || String(source);
}

export function speakerLabel(speaker) {
  switch (speaker) {
    case "caller": case "customer": return "Caller";
    case "bot": return "Bot";
    case "agent": return "Agent";
    default: return speaker ? String(speaker) : "—";
  }
}

export function formatDuration(seconds) {
  const s = Math.max(0, Math.floor(Number.isFinite(seconds) ? seconds : 0));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
}

/** A REFER/NOTIFY status (docs/events.md call.transfer_progress) in words. */
export function transferStatusText(status) {
  const n = Number(status);
  if (!Number.isFinite(n)) return String(status);
  if (n === 100) return "100 trying";
  if (n === 180 || n === 183) return `${n} ringing`;
  if (n >= 100 && n < 200) return `${n} in progress`;
  if (n === 202) return "202 accepted";
  if (n >= 200 && n < 300) return `${n} transferred`;
  if (n >= 300) return `${n} failed`;
  return String(n);
}

/** Seconds since the call was answered (or created, or first seen), frozen once it ended. */
export function callDuration(call, nowS) {
  const start = call.answered ?? call.created ?? call.firstSeen;
  if (typeof start !== "number") return 0;
  const end = call.ended && typeof call.ended.at === "number" ? call.ended.at : nowS;
  return Math.max(0, end - start);
}

/**
 * A readable message for a failed API request: `status` the HTTP status (0: no answer),
 * `body` the parsed JSON body or null. `me` is the signed-in user (for takeover conflicts).
 */
export function apiErrorText(action, status, body, me = null) {
  const err = body && typeof body === "object" && body.error && typeof body.error === "object"
    ? body.error : {};
  const detail = typeof err.message === "string" && err.message ? `: ${err.message}` : "";
  if (status === 0) return `${action} failed: the server cannot be reached.`;
  switch (err.code) {
    case "unauthorized":
      return "Your token is invalid or has expired. Sign in again with a new one.";
    case "forbidden":
      return "This token may not use the agent API (customer tokens cannot). Sign in with an agent or supervisor token.";
    case "unknown_call":
      return "That call does not exist any more.";
    case "wrong_state":
      if (action === PASS_ON_ACTION) return passOnConflictText(err, me);
      if (err.owner && err.owner !== me) return `Already taken by ${err.owner}.`;
      if (err.owner && err.owner === me) return "You already hold this call.";
      return `${action} is not possible while the call is ${stateLabel({ state: err.state }) || "in this state"}.`;
    case "target_not_allowed":
      return "That transfer target is not allowed (it is not in the server's transfer allow-list).";
    case "cannot_transfer":
      return `The call cannot be transferred${detail}.`;
    case "bad_json":
    case "bad_request":
      if (action === PASS_ON_ACTION && err.code === "bad_request") {
        return `That is not a valid agent name: enter the colleague's user name (1 to ${MAX_AGENT_NAME} printable characters).`;
      }
      return `${action} failed: the server did not understand the request${detail}.`;
    default:
      if (status === 401) return "Your token is invalid or has expired. Sign in again with a new one.";
      if (status === 403) return "This token may not do that (an agent or supervisor token is needed).";
      if (status === 404) return `${action} failed: not found (HTTP 404)${detail}.`;
      return `${action} failed (HTTP ${status}${err.code ? ` ${err.code}` : ""})${detail}.`;
  }
}

/** Why a pass-on was refused with 409 wrong_state (`err`: the body's error). */
function passOnConflictText(err, me) {
  if (err.state === "ai_active") return "The AI has this call: take it over before passing it on.";
  if (err.state && err.state !== "human_active") {
    return `The call cannot be passed on while it is ${stateLabel({ state: err.state })}.`;
  }
  if (err.owner && err.owner !== me) {
    return `The call is held by ${err.owner}: only its holder or a supervisor can pass it on.`;
  }
  return "The call cannot be passed on: only a call a person holds can be.";
}

/**
 * What is wrong with `name` as the colleague to pass a call to, before asking the server
 * (the server's rule: 1 to MAX_AGENT_NAME printable characters once trimmed), or null if
 * nothing is. `owner`: the call's holder (passing it to them would change nothing).
 */
export function agentNameProblem(name, { owner = null, me = null } = {}) {
  const text = typeof name === "string" ? name.trim() : "";
  if (!text) return "Enter the user name of the colleague to pass the call to.";
  if ([...text].length > MAX_AGENT_NAME) return `A user name has at most ${MAX_AGENT_NAME} characters.`;
  if (/(?! )[\p{C}\p{Z}]/u.test(text)) {
    return "That is not a valid user name: it contains characters that cannot be printed.";
  }
  if (owner && text === owner) {
    return owner === me ? "You already hold this call: enter a colleague's user name." : `${owner} already holds this call.`;
  }
  return null;
}

/** The transcript's line for a `call.assigned` event: "ann passed the call to bob", or
 *  "lee passed the call from ann to bob" when someone else (a supervisor) passed it on. */
export function passedLineText(ev) {
  const to = ev.new || "?";
  if (ev.by && ev.old && ev.by !== ev.old) return `${ev.by} passed the call from ${ev.old} to ${to}`;
  if (ev.by || ev.old) return `${ev.by || ev.old} passed the call to ${to}`;
  return `The call was passed to ${to}`;
}

/** True while `call` was passed to `user` (a call.assigned naming them) and they have not
 *  taken it up yet: the workbench shows it as theirs to join. */
export function assignedToMe(call, user) {
  return !!call && !!user && !call.ended && call.state === "human_active" && call.owner === user
    && !!call.assigned && call.assigned.new === user;
}

/** The status line for the user a call was passed to: "ann passed you the call from Alice:
 *  take it over to join." `callerName`: how the list names the caller (optional). */
export function passedToYouText(assigned, callerName = "") {
  const by = assigned.by || assigned.old || "A colleague";
  const whose = assigned.old && assigned.by && assigned.old !== assigned.by ? ` ${assigned.old}'s` : " the";
  return `${by} passed you${whose} call${callerName ? ` from ${callerName}` : ""}: take it over to join.`;
}

// --- what a call allows ---------------------------------------------------------------------

/**
 * Which actions the call's state allows. `ctx`: {user, role, media: {callId, state, mic} |
 * null, busy: an action in flight on this call or null}. `transfer`: a REFER; `passOn`: to
 * another agent (only a call a person holds, by its holder or a supervisor/admin). The holder
 * of a human_active call may take it over while this page is not talking in it: the colleague
 * a call was passed to joins it that way (and an owner who left its audio rejoins).
 */
export function allowedActions(call, ctx = {}) {
  const none = { listen: false, takeover: false, handback: false, transfer: false, passOn: false,
    hangup: false, leave: false };
  if (!call) return none;
  const media = ctx.media || null;
  const joined = !!media && media.callId === call.call_id && LIVE_MEDIA.has(media.state);
  const ended = !!call.ended || call.state === "ended";
  const out = { ...none, leave: joined };
  if (ended || ctx.busy) return out;
  const s = call.state;
  const mine = !call.owner || call.owner === ctx.user;
  const holder = !!call.owner && call.owner === ctx.user;
  const boss = ctx.role === "supervisor" || ctx.role === "admin";
  const silent = joined && media.mic === false; // in the audio, microphone off
  out.listen = !joined && (s === "ai_active" || s === "human_active");
  out.takeover = s === "ai_active" || (s === "human_active" && holder && (!joined || silent));
  out.handback = s === "human_active" && (mine || boss);
  out.transfer = s === "ai_active" || (s === "human_active" && (mine || boss));
  out.passOn = s === "human_active" && (holder || boss);
  // While a colleague holds the call, hanging it up is theirs (or a supervisor's): 409 otherwise.
  out.hangup = !call.hangingUp && (s !== "human_active" || mine || boss);
  return out;
}

// --- the server's clock ---------------------------------------------------------------------

/** Estimates server time - local time from (server timestamp, local receipt time) samples:
 *  delivery only delays, so the largest recent difference is the closest. */
export class ClockSkew {
  constructor(window = 32) {
    this.window = window;
    this.samples = [];
    this.offset = 0;
  }

  sample(serverS, localS) {
    if (!Number.isFinite(serverS) || !Number.isFinite(localS)) return this.offset;
    this.samples.push(serverS - localS);
    if (this.samples.length > this.window) this.samples.shift();
    this.offset = Math.max(...this.samples);
    return this.offset;
  }

  now(localS) {
    return localS + this.offset;
  }
}

// --- the call list --------------------------------------------------------------------------

const SUMMARY_DEFAULTS = { channel: "", source: "", caller: "", created: null, answered: null,
  codec: null, room: null, rtp: null, waiting_since: null };

/** Every call the page knows of: the API's snapshots merged with the event stream. */
export class CallBook {
  constructor({ maxLines = 500, maxTraces = 50, lingerS = 10, staleS = 900 } = {}) {
    this.maxLines = maxLines;
    this.maxTraces = maxTraces;
    this.lingerS = lingerS;
    this.staleS = staleS;
    this.calls = new Map();
    this.dropped = 0;
    this.seq = 0;
  }

  get(id) {
    return this.calls.get(id) || null;
  }

  _new(id, nowS) {
    const call = {
      call_id: id, state: null, owner: null, channel: "", source: "", caller: "",
      created: null, answered: null, codec: null, room: null, rtp: null,
      firstSeen: nowS, lastEvent: nowS, stateAt: null, inList: false,
      lastIntent: null, alert: null, assigned: null, ended: null, hangingUp: false,
      lines: [], traces: {}, copilot: [], transfer: [],
    };
    this.calls.set(id, call);
    return call;
  }

  /**
   * Merge `GET /api/calls`'s list, fetched at server time `requestedAt` (a state an event set
   * after that is newer and kept). A call listed before and missing now has ended.
   * Returns {added: [ids], ended: [ids]}.
   */
  applySnapshot(summaries, nowS, requestedAt = nowS) {
    const added = [];
    const ended = [];
    const seen = new Set();
    for (const s of Array.isArray(summaries) ? summaries : []) {
      if (!s || typeof s.call_id !== "string") continue;
      seen.add(s.call_id);
      let call = this.calls.get(s.call_id);
      if (!call) {
        call = this._new(s.call_id, nowS);
        added.push(s.call_id);
      }
      call.inList = true;
      for (const [f, empty] of Object.entries(SUMMARY_DEFAULTS)) if (f in s) call[f] = s[f] ?? empty;
      if (call.ended) continue;
      const fresher = call.stateAt !== null && call.stateAt > requestedAt;
      if (!fresher) {
        call.state = s.state ?? call.state;
        call.owner = s.owner ?? null;
      }
      if (s.state === "ended") this._end(call, { reason: "ended", at: nowS, answered: !!s.answered });
      else if (call.state === "human_active" && call.alert) call.alert = null;
    }
    for (const call of this.calls.values()) {
      if (call.ended || seen.has(call.call_id)) continue;
      if (call.inList) {
        this._end(call, { reason: "gone", at: nowS, answered: call.answered !== null });
        ended.push(call.call_id);
      }
    }
    return { added, ended };
  }

  /**
   * One `/api/events` message. Returns {callId, created, stateChanged, ended, dropped} (what a
   * view needs to redraw or re-fetch), or null for messages that carry no call event.
   */
  applyEvent(ev, nowS) {
    if (!ev || typeof ev !== "object" || typeof ev.type !== "string") return null;
    if (ev.type === "events.dropped") {
      const count = Number(ev.count) || 0;
      this.dropped += count;
      for (const call of this.calls.values()) {
        if (!call.ended) this._line(call, { kind: "system", text: `${count} events missed`, at: ev.at ?? nowS, dropped: count });
      }
      return { callId: null, created: false, stateChanged: false, ended: false, dropped: count, assigned: null };
    }
    const id = ev.call_id;
    if (typeof id !== "string" || !id) return null;
    let call = this.calls.get(id);
    const created = !call;
    if (!call) call = this._new(id, nowS);
    const at = typeof ev.at === "number" ? ev.at : nowS;
    call.lastEvent = nowS;
    const out = { callId: id, created, stateChanged: false, ended: false, dropped: 0, assigned: null };

    switch (ev.type) {
      case "call.started":
        if (ev.kind) call.channel = String(ev.kind);
        if (ev.source) call.source = String(ev.source);
        if (call.created === null) call.created = at;
        if (!call.state && !call.ended) call.state = "ringing";
        break;
      case "call.state_changed": {
        if (call.ended) break;
        call.state = ev.new ?? call.state;
        call.stateAt = at;
        call.assigned = null;
        out.stateChanged = true;
        if (ev.new === "ai_active" && call.answered === null && ev.old === "ringing") call.answered = at;
        if (ev.new === "human_active") {
          call.alert = null;
          const m = /^taken over by (.+)$/.exec(ev.reason || "");
          if (m) call.owner = m[1];
        } else {
          call.owner = null;
        }
        const reason = ev.reason ? ` (${ev.reason})` : "";
        this._line(call, { kind: "system", text: `${stateLabel({ state: ev.old }) || "?"} → ${stateLabel({ state: ev.new })}${reason}`, at });
        if (ev.new === "ended") {
          this._end(call, { reason: ev.reason || "ended", at, answered: call.answered !== null });
          out.ended = true;
        }
        break;
      }
      case "transcript.final": {
        this._inferActive(call, at);
        const line = { kind: "speech", speaker: String(ev.speaker || ""), text: String(ev.text ?? ""),
          turn_id: ev.turn_id ?? null, lang: ev.lang ?? null, at };
        const trace = line.turn_id !== null ? call.traces[line.turn_id] : null;
        if (line.speaker === "bot" && trace) {
          line.intent = trace.intent;
          line.source = trace.source;
        }
        this._line(call, line);
        break;
      }
      case "turn.trace": {
        this._inferActive(call, at);
        const trace = { turn_id: ev.turn_id ?? null, transcript: ev.transcript ?? "", intent: ev.intent ?? null,
          source: ev.source ?? null, answer_text: ev.answer_text ?? "", barge_in: !!ev.barge_in,
          lang: ev.lang ?? null, stages_ms: ev.stages_ms ?? null, at };
        if (trace.turn_id !== null) {
          call.traces[trace.turn_id] = trace;
          const keys = Object.keys(call.traces);
          if (keys.length > this.maxTraces) delete call.traces[keys[0]];
          for (let i = call.lines.length - 1; i >= 0; i--) {
            const l = call.lines[i];
            if (l.kind === "speech" && l.speaker === "bot" && l.turn_id === trace.turn_id) {
              l.intent = trace.intent;
              l.source = trace.source;
            }
          }
        }
        if (trace.intent) call.lastIntent = trace.intent;
        if (trace.answer_text) {
          call.copilot.push(trace);
          if (call.copilot.length > this.maxTraces) call.copilot.shift();
        }
        break;
      }
      case "turn.barge_in":
        this._line(call, { kind: "system", text: "The caller interrupted the bot", at });
        break;
      case "call.dtmf":
        this._line(call, { kind: "system", text: `Key ${ev.digit ?? "?"} pressed`, at });
        break;
      case "handoff.requested": {
        if (!call.ended && call.state !== "human_active") {
          call.alert = { reason: ev.reason ?? "", detail: ev.detail ?? "", at };
        }
        const who = ev.reason === "caller asked" ? "The caller asked for a human" : "The AI asked for a human";
        this._line(call, { kind: "system", alert: true, text: `${who}${ev.reason && ev.reason !== "caller asked" ? ` (${ev.reason})` : ""}`, at });
        break;
      }
      case "call.agent_wait":
        call.waiting_since = ev.waiting ? (call.waiting_since ?? at) : null;
        if (ev.waiting) this._line(call, { kind: "system", alert: true, text: `Waiting for an agent (${ev.reason || "asked"}), #${ev.position ?? "?"} in the queue`, at });
        break;
      case "call.note":
        this._line(call, { kind: "system", text: `Note by ${ev.by || "?"}: ${ev.text ?? ""}`, at });
        break;
      case "call.assigned": {
        // A call a person holds passed to another agent: still human_active, a new owner.
        if (call.ended || typeof ev.new !== "string" || !ev.new) break;
        const a = { old: ev.old ?? null, new: ev.new, by: ev.by ?? null, at };
        call.state = "human_active";
        call.owner = a.new;
        call.stateAt = at;
        call.alert = null;
        call.assigned = a;
        out.assigned = a;
        this._line(call, { kind: "system", text: passedLineText(a), at });
        break;
      }
      case "call.transfer_progress": {
        const p = { target: ev.target ?? "", status: ev.status ?? null, at };
        call.transfer.push(p);
        if (call.transfer.length > 20) call.transfer.shift();
        this._line(call, { kind: "system", text: `Transfer${p.target ? ` to ${p.target}` : ""}: ${transferStatusText(p.status)}`, at });
        break;
      }
      case "call.ended":
        this._end(call, { reason: ev.reason ?? "ended", at, answered: !!ev.answered });
        out.ended = true;
        break;
      default:
        break; // a type this page does not know: ignored (docs/events.md, version rule)
    }
    return out;
  }

  /** Drop calls that ended more than lingerS ago (but not `keepId`, the one on screen) and
   *  event-only calls nothing was heard of for staleS. Returns the removed ids. */
  prune(nowS, keepId = null) {
    const removed = [];
    for (const [id, call] of this.calls) {
      if (id === keepId) continue;
      const gone = call.ended ? nowS - call.ended.seenAt > this.lingerS
        : !call.inList && nowS - call.lastEvent > this.staleS;
      if (gone) {
        this.calls.delete(id);
        removed.push(id);
      }
    }
    return removed;
  }

  /** The calls for the list: those waiting for an agent first (longest wait first), then the
   *  other live ones, oldest first, then the ended ones still lingering. */
  list() {
    const all = [...this.calls.values()];
    const rank = (c) => (c.ended ? 2 : c.waiting_since ? 0 : 1);
    const start = (c) => c.waiting_since ?? c.created ?? c.firstSeen ?? 0;
    return all.sort((a, b) => rank(a) - rank(b) || start(a) - start(b) || (a.call_id < b.call_id ? -1 : 1));
  }

  /** Mark a call's state after an action of ours the server accepted (or the state its
   *  refusal named). A call passed to us is taken up: assignedToMe() is false from then on. */
  setState(id, state, owner, nowS) {
    const call = this.calls.get(id);
    if (!call || call.ended) return;
    call.state = state;
    call.owner = owner;
    call.stateAt = nowS;
    call.assigned = null;
    if (state === "human_active") call.alert = null;
  }

  _inferActive(call, at) {
    // An event-only call (a browser caller's room) may never say it was answered.
    if (!call.ended && (call.state === null || call.state === "ringing") && !call.inList) {
      call.state = "ai_active";
      if (call.answered === null) call.answered = at;
    }
  }

  _end(call, ended) {
    if (call.ended) return;
    call.ended = { ...ended, seenAt: ended.at };
    call.state = "ended";
    call.alert = null;
    call.assigned = null;
    this._line(call, { kind: "system", text: `The call ended (${ended.reason})`, at: ended.at });
  }

  _line(call, line) {
    line.key = `l${++this.seq}`;
    call.lines.push(line);
    if (call.lines.length > this.maxLines) call.lines.splice(0, call.lines.length - this.maxLines);
  }
}

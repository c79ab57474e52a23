// The chosen call's transcript (caller, bot, agents and system lines, drawn incrementally and
// kept scrolled to the end) and its co-pilot panel (the AI's recent answers, with a Copy
// button). agent_view.js calls these from renderView().

import { $, app, setText } from "./agent_state.js";
import { sourceLabel, speakerLabel } from "./workbench.js";

const COPILOT_SHOWN = 5;

export function resetTranscript(callId) {
  app.rendered.callId = callId;
  app.rendered.lines = new Map();
  app.rendered.copilot = "";
  $("transcript").replaceChildren();
  $("copilot-list").replaceChildren();
}

export function renderTranscript(call) {
  const list = $("transcript");
  if (app.rendered.callId !== call.call_id) resetTranscript(call.call_id);
  const els = app.rendered.lines;
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const keep = new Set();
  let added = false;
  for (const line of call.lines) {
    keep.add(line.key);
    let li = els.get(line.key);
    if (!li) {
      li = lineElement(line);
      els.set(line.key, li);
      list.append(li);
      added = true;
    }
    if (line.kind === "speech" && line.speaker === "bot") {
      const meta = li.querySelector(".meta");
      const text = line.source || line.intent
        ? `answer: ${sourceLabel(line.source)}${line.intent ? ` · intent: ${line.intent}` : ""}` : "";
      setText(meta, text);
      meta.hidden = !text;
    }
  }
  for (const [key, li] of els) {
    if (!keep.has(key)) {
      li.remove();
      els.delete(key);
    }
  }
  $("transcript-empty").hidden = call.lines.length > 0;
  if (added && atBottom) list.scrollTop = list.scrollHeight;
}

function lineElement(line) {
  const li = document.createElement("li");
  li.dataset.kind = line.kind;
  if (line.kind === "system") {
    li.className = line.alert ? "system alert" : line.dropped ? "system dropped" : "system";
    li.textContent = line.text;
    return li;
  }
  li.dataset.speaker = line.speaker;
  const who = document.createElement("span");
  who.className = "speaker";
  who.textContent = speakerLabel(line.speaker);
  const said = document.createElement("span");
  said.className = "text";
  said.textContent = line.text;
  if (line.lang) said.lang = line.lang;
  li.append(who, said);
  if (line.speaker === "bot") {
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.hidden = true;
    li.append(meta);
  }
  return li;
}

export function renderCopilot(call) {
  const recent = call.copilot.slice(-COPILOT_SHOWN).reverse();
  const signature = `${call.call_id}|${recent.map((t) => `${t.turn_id}:${t.at}`).join(",")}`;
  $("copilot-empty").hidden = recent.length > 0;
  if (app.rendered.copilot === signature) return;
  app.rendered.copilot = signature;
  $("copilot-list").replaceChildren(...recent.map((t, i) => {
    const li = document.createElement("li");
    li.className = "suggestion";
    li.dataset.source = t.source || "";
    const q = document.createElement("p");
    q.className = "question";
    const qLabel = document.createElement("span");
    qLabel.className = "speaker";
    qLabel.textContent = "Caller";
    const qText = document.createElement("span");
    qText.textContent = t.transcript || "(not understood)";
    q.append(qLabel, qText);
    const meta = document.createElement("p");
    meta.className = "meta";
    meta.textContent = `${sourceLabel(t.source)}${t.intent ? ` · intent: ${t.intent}` : ""}${t.barge_in ? " · interrupted" : ""}`;
    const answer = document.createElement("blockquote");
    answer.className = "answer";
    answer.id = `copilot-answer-${i}`;
    answer.textContent = t.answer_text;
    if (t.lang) answer.lang = t.lang;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "copy";
    copy.textContent = "Copy";
    copy.dataset.text = t.answer_text;
    copy.setAttribute("aria-describedby", answer.id);
    li.append(q, meta, answer, copy);
    return li;
  }));
}

export async function copyText(button) {
  const text = button.dataset.text || "";
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // No clipboard API (plain http on another host): select-and-copy instead.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.append(area);
    area.select();
    try { ok = document.execCommand("copy"); } catch { ok = false; }
    area.remove();
  }
  button.textContent = ok ? "Copied" : "Copy failed";
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

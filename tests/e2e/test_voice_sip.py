"""kefu's AI voice loop end to end over SIP: SIPp callers ask spoken questions, tshark
captures what kefu says back, Whisper transcribes it.

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/e2e -q'``.
One kefu process serves the whole module (its models load once); the LLM tests start a
second one pointed at a fake OpenAI-compatible server in this process.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import KefuProcess, start_kefu
from helpers.events_reader import EventsReader, one_call
from helpers.speech import heard_text

from loadtest.peers import take_ports
from loadtest.voice import Heard, Question, build_script, run_sip
from loadtest.voice_report import turns_of

pytestmark = [pytest.mark.netns, pytest.mark.peer]

TRANSFER_TARGET = "sip:queue@127.0.0.1:5999"
AI = {"KEFU_CALLS_MEDIA_MODE": "ai"}


def words(text: str) -> str:
    return " ".join(text.lower().replace(",", " ").replace(".", " ").split())


@pytest.fixture(scope="module")
def voice() -> object:
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


@pytest.fixture(scope="module")
def asr() -> Any:
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

    engine = WhisperAsr()
    assert engine.ready, engine.error
    return engine


@pytest.fixture(scope="module")
def ask(voice: object):  # noqa: ANN201 - a factory
    from kefu.ai_bridge.listen.heldout import speak

    def make(text: str) -> Question:
        return Question(text[:20], speak(voice, text, noise_scale=0, noise_w_scale=0), text)

    return make


@pytest.fixture(scope="module")
def kefu_ai(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KefuProcess]:
    tmp = tmp_path_factory.mktemp("kefu-ai")
    env = {
        **AI,
        "KEFU_AI_INTERACTION_LOG": str(tmp / "interactions.jsonl"),
        "KEFU_WEBRTC_ICE_HOST_ADDRESSES": "127.0.0.1",  # agents join calls' rooms over WebRTC
    }
    server = start_kefu(tmp, "--transfer-target", TRANSFER_TARGET, env=env)
    yield server
    server.stop()


def traces(server: KefuProcess) -> list[dict[str, Any]]:
    path = Path(str(server.log_path.parent / "interactions.jsonl"))
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def replies(heard: list[Heard], asr: Any) -> list[dict[str, Any]]:
    turns = turns_of(heard, None, asr)
    for t in turns:
        t["reply_text"] = words(t.get("reply_text", ""))
    return turns


# -- one batch of concurrent calls shared by the answer tests ------------------------------

QUESTIONS = {
    "hours": ("What are your opening hours?", ["monday", "friday"]),
    "delivery": ("How long does delivery take?", ["business days"]),
    "payment": ("Can I pay with PayPal?", ["visa", "mastercard"]),
    "mars": ("What's the weather on Mars?", ["colleague"]),
}


@pytest.fixture(scope="module")
def batch(
    kefu_ai: KefuProcess, ask: Any, asr: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    names = list(QUESTIONS)
    scripts = [build_script([ask(QUESTIONS[n][0])], gap_s=8.0) for n in names]
    heard = run_sip(kefu_ai.sip, scripts, tmp_path_factory.mktemp("batch"), concurrency=4)
    for h in heard:
        assert h.ok, h.error
    return dict(zip(names, replies(heard, asr), strict=True))


@pytest.mark.parametrize("name", ["hours", "delivery", "payment"])
def test_spoken_question_gets_the_kb_answer_spoken_back(
    batch: dict[str, dict[str, Any]], name: str
) -> None:
    turn = batch[name]
    assert turn["latency_ms"] is not None, "kefu never answered on the wire"
    for key in QUESTIONS[name][1]:
        assert key in turn["reply_text"], turn["reply_text"]


def test_unanswerable_question_offers_a_colleague_and_invents_nothing(
    batch: dict[str, dict[str, Any]], kefu_ai: KefuProcess
) -> None:
    reply = batch["mars"]["reply_text"]
    assert "colleague" in reply, reply
    # The fallback sentence and nothing else: no KB facts, no weather.
    assert not any(w in reply for w in ("degrees", "sunny", "business days", "monday")), reply
    mars = [t for t in traces(kefu_ai) if "mars" in str(t.get("transcript", "")).lower()]
    assert mars and mars[0]["source"] == "fallback", mars


def test_latency_marks_reach_the_interaction_log(
    batch: dict[str, dict[str, Any]], kefu_ai: KefuProcess
) -> None:
    answered = [t for t in traces(kefu_ai) if t.get("turn_id", 0) > 0]
    assert len(answered) >= 4
    for t in answered:
        assert t["stages_ms"]["response"] is not None, t
        assert t["stages_ms"]["tts"] is not None, t


# -- barge-in -------------------------------------------------------------------------------


def test_caller_interrupts_a_long_answer_and_is_answered(
    kefu_ai: KefuProcess, ask: Any, asr: Any, tmp_path: Path
) -> None:
    long_q = ask("Where is your nearest store?")
    second = ask("Do you take gift cards?")
    lead = 5.0
    # The bot starts answering ~0.8 s after the question (later on a loaded box) and its store
    # answer runs ~9 s: cut in 4.5 s after the question, well inside the answer either way.
    interrupt_at = lead + len(long_q.pcm) / 16000 + 4.5
    script = build_script([long_q, second], lead_s=lead, at=[lead, interrupt_at], tail_s=8.0)
    [heard] = run_sip(kefu_ai.sip, [script], tmp_path)
    assert heard.ok, heard.error
    s2 = heard.speech_starts[1]
    assert s2 is not None
    # Within the last second: a pause between two clauses of the answer is not its end.
    assert heard.voiced_within(s2 - 1.0, s2), "the bot was not speaking when the caller cut in"
    stopped = heard.silence_from(s2, hold_s=0.5)
    assert stopped is not None, "the bot never stopped talking"
    stop_ms = (stopped - s2) * 1000
    # Functional bound: the bot cut its long answer short. The 250-300 ms target is a
    # benchmark (python -m loadtest voice --barge-in, docs/BENCHMARKS.md), not a unit assert
    # that only an idle machine meets.
    assert stop_ms <= 1500, f"bot audio stopped {stop_ms:.0f} ms after the caller's speech began"
    turns = replies([heard], asr)
    assert "gift card" in turns[1]["reply_text"], turns[1]["reply_text"]
    barges = kefu_ai.events("barge_in")
    assert barges and float(barges[-1]["stop_latency_ms"]) <= 1500, barges


# -- "I want to talk to a human" -> REFER -----------------------------------------------------


def test_asking_for_a_human_transfers_the_call_with_refer(
    kefu_ai: KefuProcess, ask: Any, tmp_path: Path
) -> None:
    script = build_script([ask("I want to talk to a human.")], gap_s=6.0)
    # uac_dtmf_refer waits for kefu's REFER, accepts it, NOTIFYs success and takes kefu's BYE.
    [heard] = run_sip(kefu_ai.sip, [script], tmp_path, scenario="uac_dtmf_refer")
    assert heard.ok, heard.error
    handoffs = kefu_ai.events("handoff_requested")
    assert any(h.get("reason") == "caller asked" for h in handoffs), handoffs
    log = kefu_ai.log_path.read_text()
    assert TRANSFER_TARGET.split(":", 1)[1] in log


# -- the LLM path ----------------------------------------------------------------------------

LLM_SENTENCE = "Purple elephants carry every parcel on Tuesday."


class FakeLlm:
    """An OpenAI-compatible streaming endpoint on 127.0.0.1, in a thread of this process."""

    def __init__(self) -> None:
        # A reserved port, not :0: after stop() it must refuse connections, and a port from
        # the pool is never handed out again (an ephemeral one could be reused meanwhile).
        self.port = take_ports()
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: Any = None

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        self.requests += 1
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in LLM_SENTENCE.split(" "):
            chunk = {"choices": [{"index": 0, "delta": {"content": piece + " "}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _start(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="module")
def llm_kefu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KefuProcess, FakeLlm]]:
    llm = FakeLlm()
    llm.start()
    tmp = tmp_path_factory.mktemp("kefu-llm")
    env = {
        **AI,
        "KEFU_AI_LLM_URL": f"http://127.0.0.1:{llm.port}",
        "KEFU_AI_INTERACTION_LOG": str(tmp / "interactions.jsonl"),
    }
    server = start_kefu(tmp, env=env)
    yield server, llm
    server.stop()
    llm.close()


def test_llm_sentence_is_spoken_then_kb_answer_when_the_llm_is_down(
    llm_kefu: tuple[KefuProcess, FakeLlm], ask: Any, asr: Any, tmp_path: Path
) -> None:
    server, llm = llm_kefu
    question = ask("How long does delivery take?")
    [up] = run_sip(server.sip, [build_script([question], gap_s=6.0)], tmp_path / "up")
    assert up.ok, up.error
    assert llm.requests >= 1
    spoken = replies([up], asr)[0]["reply_text"]
    assert "elephant" in spoken and "business days" not in spoken, spoken

    llm.stop()  # connection refused from now on: the dialog must fall back to the KB
    [down] = run_sip(server.sip, [build_script([question], gap_s=6.0)], tmp_path / "down")
    assert down.ok, down.error
    spoken = replies([down], asr)[0]["reply_text"]
    assert "business days" in spoken and "elephant" not in spoken, spoken
    sources = [t["source"] for t in traces(server) if t.get("turn_id", 0) > 0]
    assert sources[:1] == ["llm"] and sources[-1] == "kb", sources


# -- the call seen from outside: GET /api/events ------------------------------------------------


def test_an_events_reader_sees_the_call_the_question_the_answer_and_the_end(
    kefu_ai: KefuProcess, ask: Any, tmp_path: Path
) -> None:
    secret = (kefu_ai.log_path.parent / "state" / "jwt-secret").read_text().strip()
    with EventsReader(kefu_ai.http, secret) as reader:
        script = build_script([ask("How long does delivery take?")], gap_s=6.0)
        [heard] = run_sip(kefu_ai.sip, [script], tmp_path)
        assert heard.ok, heard.error
        ended = reader.wait_for("call.ended")
    call_id = ended["call_id"]
    mine = one_call(reader.events, call_id)
    kinds = [e["type"] for e in mine]
    assert all(e["v"] == 1 for e in mine)
    assert kinds[0] == "call.started" and kinds[-1] == "call.ended", kinds
    answered = kinds.index("call.state_changed")
    assert mine[answered]["new"] == "ai_active"
    lines = [e for e in mine if e["type"] == "transcript.final"]
    asked = next(i for i, e in enumerate(mine) if e in lines and e["speaker"] == "caller")
    assert "deliver" in mine[asked]["text"].lower(), mine[asked]
    turn = mine[asked]["turn_id"]
    told = next(
        i
        for i, e in enumerate(mine)
        if e in lines and e["speaker"] == "bot" and e["turn_id"] == turn
    )
    assert "business days" in mine[told]["text"], mine[told]
    traced = next(
        i for i, e in enumerate(mine) if e["type"] == "turn.trace" and e["turn_id"] == turn
    )
    assert answered < asked < told < traced < len(mine) - 1, kinds
    trace = mine[traced]
    assert trace["speech_end"] <= trace["asr_final"] <= trace["first_packet"], trace
    assert trace["source"] == "kb" and trace["stages_ms"]["response"] is not None, trace
    assert ended["answered"] is True


# -- a human agent takes the call over and hands it back ------------------------------------

AGENT_LINE = "Hello, this is Maria from the service team. I am taking over your call now."


def _agent_run(kefu: KefuProcess, secret: str, wav: Path, out: Path, reader: EventsReader) -> None:
    """Take the live call over once the bot has been answering for a second (mid-answer)."""
    import subprocess
    import sys
    import time

    from kefu.signaling.tokens import mint_token

    for _ in range(300):
        if any(
            e["type"] == "transcript.final" and e["speaker"] == "bot" and e["turn_id"] > 0
            for e in reader.events
        ):
            break
        time.sleep(0.05)
    time.sleep(1.0)
    token = mint_token(secret, "maria", "agent")
    cmd = [
        sys.executable,
        "-m",
        "loadtest",
        "agent",
        "--target",
        kefu.http,
        "--first",
        "--wav",
        str(wav),
        "--record",
        str(out.with_suffix(".wav")),
        "--listen-s",
        "0.3",
        "--hand-back",
        "--token",
        token,
        "--json",
        str(out),
    ]
    subprocess.run(cmd, timeout=90, check=False, capture_output=True)
    # The call goes on with the AI: the agent files a note with its record.
    import urllib.request

    call_id = json.loads(out.read_text()).get("call_id", "")
    note = urllib.request.Request(
        f"{kefu.http}/api/calls/{call_id}/notes",
        data=json.dumps({"text": "Asked about hours; handed back."}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(note, timeout=10) as resp:
        assert resp.status == 201


def test_an_agent_takes_over_mid_answer_is_heard_alone_and_hands_back(
    kefu_ai: KefuProcess, ask: Any, asr: Any, voice: object, tmp_path: Path
) -> None:
    import threading

    import numpy as np

    from kefu.ai_bridge.listen.heldout import speak, write_wav

    secret = (kefu_ai.log_path.parent / "state" / "jwt-secret").read_text().strip()
    line = speak(voice, AGENT_LINE, noise_scale=0, noise_w_scale=0)
    wav = tmp_path / "agent.wav"  # the agent's words, then 6 s of listening before hand-back
    write_wav(wav, np.concatenate([line, np.zeros(16000 * 6, np.int16)]))
    hours, thanks, delivery = (
        ask("What are your opening hours?"),
        ask("Thank you Maria, that is very helpful."),
        ask("How long does delivery take?"),
    )
    # The bot answers the hours from ~3.5 s; the agent cuts in a second later, speaks ~4.5 s,
    # listens to the caller's thanks and hands back ~16 s in; then the caller asks again.
    script = build_script([hours, thanks, delivery], at=[1.0, 11.5, 21.0], tail_s=9.0)
    out = tmp_path / "agent.json"
    with EventsReader(kefu_ai.http, secret) as reader:
        agent = threading.Thread(
            target=_agent_run, args=(kefu_ai, secret, wav, out, reader), daemon=True
        )
        agent.start()
        [heard] = run_sip(kefu_ai.sip, [script], tmp_path)
        agent.join(60)
    assert heard.ok, heard.error
    result = json.loads(out.read_text())
    assert result["ok"], result
    assert result["takeover_status"] == 200 and result["handback_status"] == 200, result
    took, back = float(result["t_ack"]), float(result["t_handback_ack"])

    # Before the takeover the caller heard the bot start its answer; from the takeover to the
    # hand-back only the agent: Maria's words and none of the bot's answer.
    asked = heard.speech_ends[0]
    assert asked is not None
    before = words(asr.transcribe_sync(heard.reply_between(asked, took)).text)
    during = words(asr.transcribe_sync(heard.reply_between(took, back)).text)
    assert "open" in before or "monday" in before, before
    assert "maria" in during and "service team" in during, during
    assert not any(w in during for w in ("monday", "friday", "saturday", "sunday")), during
    # The agent heard the caller thank them (the phone participant of the call's room).
    agent_heard = heard_text(asr, _read_wav48(out.with_suffix(".wav")), 48000)
    assert "thank you" in agent_heard, agent_heard

    # After the hand-back the AI answers the next question, and only once the caller asked.
    turns = replies([heard], asr)
    assert "business days" in turns[2]["reply_text"], turns[2]
    assert heard.speech_starts[2] is not None
    assert not heard.voiced_within(back + 1.0, heard.speech_starts[2]), "the AI spoke first"
    # The AI transcribed the agent's side too, as the agent's.
    said = [
        e["text"].lower()
        for e in one_call(reader.events, result["call_id"])
        if e["type"] == "transcript.final" and e["speaker"] == "agent"
    ]
    assert any("maria" in t for t in said), said
    notes = [t for t in traces(kefu_ai) if t.get("type") == "note"]
    assert any(n["call_id"] == result["call_id"] and n["by"] == "maria" for n in notes), notes
    states = [(c["old"], c["new"]) for c in result["state_changes"]]
    assert ("ai_active", "human_active") in states and ("human_active", "ai_active") in states


def _read_wav48(path: Path) -> Any:
    import wave

    import numpy as np

    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == 48000, w.getframerate()
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)

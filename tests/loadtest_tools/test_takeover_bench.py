"""``python -m loadtest takeover``: the arithmetic on synthetic frame lists (which voiced
frames the caller heard were the bot's and which the agent's, the caller → agent delay, the
caller frames the agent did not hear, the percentiles and the table row), and the hook that
lets it time the click inside :func:`loadtest.agent_client.run_agent`.

The real run (SIPp, tshark, kefu, an aiortc agent) is the benchmark's; see docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from loadtest import takeover_bench as tb
from loadtest.agent_client import AgentError, Options, run_agent
from loadtest.voice import Heard, Placed, Question, Script
from loadtest.webrtc_client import RATE, write_wav

F = 0.02
CLICK = 1000.0
LOUD, QUIET = 2000.0, 0.0


def frames(start: float, pattern: list[bool], level: float = LOUD) -> list[tuple[float, float]]:
    """One frame every 20 ms from ``start``: voiced where the pattern says so."""
    return [(start + i * F, level if v else QUIET) for i, v in enumerate(pattern)]


# The agent's WAV as its microphone sends it: 10 silent frames (the lead), a word of 30
# frames, a pause of 14, a word of 40, then silence.
WAV = [False] * 10 + [True] * 30 + [False] * 14 + [True] * 40 + [False] * 20
MIC_FIRST = CLICK + 0.004
PATH_S = 0.2


def caller_heard(
    *, bot_until: float, leak_at: float | None = None, path_s: float = PATH_S
) -> list[tuple[float, float]]:
    """kefu -> caller: the bot talking from CLICK - 1 s until ``bot_until``, silence, then the
    agent's WAV ``path_s`` after it left the microphone (packets every 20 ms throughout)."""
    out = []
    t = CLICK - 1.0
    while t < CLICK + 3.0:
        j = int(np.floor((t - path_s - MIC_FIRST) / F + 1e-9))
        agent = 0 <= j < len(WAV) and WAV[j]
        bot = t < bot_until
        leak = leak_at is not None and abs(t - leak_at) < 1e-6
        out.append((t, LOUD if (agent or bot or leak) else QUIET))
        t = round(t + F, 6)
    return out


# --- telling the bot from the agent ---------------------------------------------------------


def test_the_bot_stops_then_the_agent_is_heard_after_its_path_delay() -> None:
    received = caller_heard(bot_until=CLICK + 0.13)
    split = tb.split_bot_agent(
        received, answer_start=CLICK - 1.0, mic_first_frame=MIC_FIRST, wav_voiced=WAV, until=1e9
    )
    assert split.last_bot == pytest.approx(CLICK + 0.12)
    onset = MIC_FIRST + 10 * F
    assert split.first_agent is not None
    assert split.first_agent - onset == pytest.approx(PATH_S, abs=F + 1e-6)
    assert split.delay_s == pytest.approx(PATH_S, abs=F)
    assert len(split.agent) == 70
    assert split.foreign == []


def test_a_bot_frame_in_the_agents_pause_is_foreign_not_the_agents() -> None:
    # The WAV's pause is frames 40-53: at the caller MIC_FIRST + 0.2 s + 40..53 frames; a
    # voiced frame there is more than 5 frames from the words only at frames 45-48.
    leak = round(CLICK + 1.14, 6)
    received = caller_heard(bot_until=CLICK + 0.05, leak_at=leak)
    assert dict(received)[leak] == LOUD
    split = tb.split_bot_agent(
        received, answer_start=CLICK - 1.0, mic_first_frame=MIC_FIRST, wav_voiced=WAV, until=1e9
    )
    assert split.foreign == [pytest.approx(leak)]
    assert split.last_bot == pytest.approx(CLICK + 0.04)


def test_a_bot_that_keeps_talking_past_the_agents_lead_is_still_the_bot() -> None:
    # The bot goes on 0.35 s after the click: past the moment the agent's first voiced frame
    # left the mic (0.2 s), but the agent's voice only arrives 0.4 s after the click.
    received = caller_heard(bot_until=CLICK + 0.35)
    split = tb.split_bot_agent(
        received, answer_start=CLICK - 1.0, mic_first_frame=MIC_FIRST, wav_voiced=WAV, until=1e9
    )
    assert split.last_bot == pytest.approx(CLICK + 0.34)
    assert split.first_agent == pytest.approx(MIC_FIRST + 10 * F + PATH_S, abs=F)


def test_without_the_agents_voice_every_voiced_frame_is_the_bots() -> None:
    received = frames(CLICK - 0.5, [True] * 40)
    split = tb.split_bot_agent(
        received, answer_start=CLICK - 1.0, mic_first_frame=MIC_FIRST, wav_voiced=WAV, until=1e9
    )
    assert split.first_agent is None or split.first_agent > CLICK  # no content lines up well
    silent = tb.split_bot_agent(
        received,
        answer_start=CLICK - 1.0,
        mic_first_frame=MIC_FIRST,
        wav_voiced=[False] * 50,
        until=1e9,
    )
    assert silent.agent == [] and len(silent.bot) == 40 and silent.delay_s is None


def test_last_audible_counts_the_codecs_fade_out() -> None:
    received = [(CLICK + 0.02, 900.0), (CLICK + 0.04, 200.0), (CLICK + 0.06, 40.0)]
    received += [(CLICK + 0.08, 0.0), (CLICK + 0.1, 3.0)]
    assert tb.last_audible(received, CLICK, CLICK + 1) == pytest.approx(CLICK + 0.06)
    assert tb.last_audible(received, CLICK + 0.07, CLICK + 1) is None


def test_bot_audio_after_the_click_that_replays_earlier_audio_is_recognised() -> None:
    rng = np.random.default_rng(5)
    speech = (rng.standard_normal(8000) * 2000).astype(np.int16)  # 1 s before the click
    replay = speech[8000 - 1600 : 8000 - 1600 + 960]  # 120 ms first heard 200 ms earlier
    fresh = (rng.standard_normal(960) * 2000).astype(np.int16)
    for after, similar in ((replay, True), (fresh, False)):
        pcm = np.concatenate([speech, after, np.zeros(800, np.int16)])
        packets = [(CLICK - 1.0 + k * F, pcm[k * 160 : (k + 1) * 160]) for k in range(61)]
        last_bot = CLICK + 5 * F  # the 6 packets after the click
        found = tb.repeat_after(packets, CLICK, last_bot)
        assert found is not None
        if similar:
            assert found["similarity"] > 0.99 and found["earlier_ms"] == pytest.approx(200.0)
        else:
            assert found["similarity"] < 0.5
    assert tb.repeat_after(packets, CLICK, CLICK - 0.1) is None  # the bot stopped before
    assert tb.find_repeat(np.zeros(8000, np.int16), 4000, 800, search=8000) is None


# --- the caller's frames at the agent -------------------------------------------------------


def speech_pattern(n: int, seed: int = 3) -> list[bool]:
    """Words and pauses of random lengths (so the envelope has one best alignment)."""
    rng = np.random.default_rng(seed)
    out: list[bool] = []
    while len(out) < n:
        out += [True] * int(rng.integers(5, 25)) + [False] * int(rng.integers(3, 15))
    return out[:n]


def test_the_caller_to_agent_delay_is_found_despite_jitter() -> None:
    pattern = speech_pattern(400)
    sent = frames(CLICK, pattern)
    rng = np.random.default_rng(1)
    heard = [(at + 0.183 + float(rng.uniform(-0.004, 0.004)), lvl) for at, lvl in sent]
    lag, score = tb.estimate_lag(sent, heard)
    assert lag == pytest.approx(0.183, abs=0.011)
    assert score >= 0.95 * sum(pattern)
    assert tb.estimate_lag(sent, []) == (None, 0)


def test_frames_the_agent_did_not_hear_are_counted_inside_the_window_only() -> None:
    pattern = speech_pattern(300)
    sent = frames(CLICK, pattern)
    lag = 0.15
    voiced_idx = [i for i, v in enumerate(pattern) if v]
    dropped = set(voiced_idx[100:105]) | {voiced_idx[5]}  # voiced_idx[5] is before the window
    heard = [(at + lag, 0.0 if i in dropped else lvl) for i, (at, lvl) in enumerate(sent)]
    window = (CLICK + 1.0, CLICK + 5.0)
    in_window = [i for i in voiced_idx if window[0] <= CLICK + i * F < window[1]]
    assert voiced_idx[5] not in in_window and set(voiced_idx[100:105]) <= set(in_window)
    m = tb.match_frames(sent, heard, lag_s=lag, window=window)
    assert m.sent_voiced == len(in_window)
    assert m.lost == 5 and m.heard == len(in_window) - 5
    assert m.missing == [pytest.approx(CLICK + i * F) for i in voiced_idx[100:105]]


def test_half_a_frame_off_is_found_so_word_onsets_are_not_counted_lost() -> None:
    pattern = speech_pattern(300)
    sent = frames(CLICK, pattern)
    heard = [(at + 0.2 + 0.011, lvl) for at, lvl in sent]  # the envelope said 0.2
    window = (CLICK, CLICK + 6.0)
    lag, m = tb.best_match(sent, heard, lag_s=0.2, window=window)
    assert m.lost == 0 and m.sent_voiced == sum(pattern)
    assert 0.2 <= lag <= 0.22
    # the refinement only ever helps: never fewer matches than at the envelope's delay
    assert m.heard >= tb.match_frames(sent, heard, lag_s=0.2, window=window).heard


def test_one_heard_frame_matches_one_sent_frame() -> None:
    sent = [(CLICK, LOUD), (CLICK + 0.02, LOUD)]
    heard = [(CLICK + 0.21, LOUD)]  # within 40 ms of both, but only one frame
    m = tb.match_frames(sent, heard, lag_s=0.2, window=(CLICK - 1, CLICK + 1))
    assert (m.sent_voiced, m.heard, m.lost) == (2, 1, 1)


def test_the_callers_track_is_the_one_that_lines_up_with_what_the_caller_sent() -> None:
    pattern = speech_pattern(300)
    sent = frames(CLICK, pattern)
    bot = frames(CLICK, [not v for v in speech_pattern(300, seed=9)])
    phone = [(at + 0.1, lvl) for at, lvl in sent]
    track, lag = tb.pick_track(sent, [bot, phone])
    assert track == 1 and lag == pytest.approx(0.1, abs=0.011)
    assert tb.pick_track(sent, []) == (None, None)


# --- small helpers --------------------------------------------------------------------------


def test_helpers() -> None:
    assert tb.from_port("sip:sipp@127.0.0.1:6012") == 6012
    assert tb.from_port("<sip:sipp@127.0.0.1:6012;transport=udp>") == 6012
    assert tb.from_port("sip:alice@example.com") is None and tb.from_port(None) is None
    assert tb.word_recall("Do you take gift cards?", "do you take gift cards") == 1.0
    assert tb.word_recall("thank you thank you", "thank you") == 0.5
    assert tb.word_recall("a b", None) is None
    s = tb.stats([10.0, None, 30.0, 20.0])
    assert (s["p50"], s["max"], s["n"]) == (20.0, 30.0, 3)
    assert tb.stats([None])["n"] == 0
    samples = [(0.0, 1.0), (1.0, 1.5), (2.0, 2.5)]
    assert tb.cpu_between(samples, 0.5, 1.5) == pytest.approx(75.0)  # 0.0 -> 2.0: 1.5 s
    assert tb.cpu_span(samples) == pytest.approx(75.0)
    assert tb.cpu_between(samples, -1.0, 1.0) is None and tb.cpu_span(samples[:1]) is None
    pcm = np.concatenate([np.zeros(960, np.int16), np.full(960, 1000, np.int16), np.ones(10)])
    assert tb.voiced_flags(pcm, 960) == [False, True, False]
    events = [
        {"type": "transcript.final", "speaker": "caller", "turn_id": 1, "text": "q one"},
        {"type": "transcript.final", "speaker": "bot", "turn_id": 1, "text": "answer"},
        {"type": "transcript.final", "speaker": "caller", "turn_id": 3, "text": "q two"},
    ]
    assert tb.caller_transcripts(events) == {"q1": "q one", "thanks": None, "q2": "q two"}


def test_the_agent_hears_the_bot_answer_on_the_track_that_is_not_the_callers() -> None:
    greeting = frames(CLICK - 6.0, [True] * 100)  # the bot's track: the greeting
    question = frames(CLICK - 2.0, [True] * 60 + [False] * 40)  # the caller's: Q1, silence
    picked = tb.caller_track([greeting, question])
    assert picked is not None
    assert picked[0] == 1 and picked[1] == pytest.approx(CLICK - 2.0 + 59 * F)
    assert tb.voiced_after([greeting, question], *picked) is None
    greeting += frames(CLICK - 0.5, [False, False, True])  # the answer begins
    assert tb.voiced_after([greeting, question], *picked) == pytest.approx(CLICK - 0.5 + 2 * F)
    assert tb.caller_track([question]) is None


def test_timestamp_jumps_are_skipped_frames() -> None:
    packets = [(0.0, 0), (0.02, 160), (0.04, 1120), (0.06, 1280), (0.08, 0xFFFFFFF0)]
    packets += [(0.10, (0xFFFFFFF0 + 320) & 0xFFFFFFFF)]  # wraps: one frame skipped
    assert tb.timestamp_skips(packets[:4]) == [(0.04, 5)]
    assert tb.timestamp_skips(packets[4:]) == [(0.10, 1)]
    assert tb.timestamp_skips([(0.0, 320), (0.02, 160)]) == []  # backwards: not a skip


# --- one takeover record, and the summary ---------------------------------------------------


def synthetic_takeover() -> tuple[tb.CallWire, dict[str, Any]]:
    """Q1 ends at CLICK - 1.5, the bot answers from CLICK - 1.0 and is heard until 0.13 s
    after the click, the agent 0.2 s after its mic; hand-back at CLICK + 5, Q2 from CLICK + 6
    to CLICK + 7.5, answered 0.6 s later. The caller says 2 s of words during the takeover,
    of which the agent misses 3 frames."""
    received = caller_heard(bot_until=CLICK + 0.13)
    received = [(at, lvl) for at, lvl in received if at < CLICK + 5.0]
    received += frames(CLICK + 8.1, [True] * 50)
    q = Question("q", np.zeros(10, np.int16))
    script = Script(
        (Placed(q, 0, 0, 0), Placed(q, 0, 0, 0), Placed(q, 0, 0, 0)), np.zeros(0, np.int16)
    )
    heard = Heard(
        script,
        speech_ends=[CLICK - 1.5, CLICK + 3.0, CLICK + 7.5],
        speech_starts=[CLICK - 3.0, CLICK + 1.0, CLICK + 6.0],
        frames=received,
    )
    words = [False] * 50 + [True] * 40 + [False] * 10 + [True] * 60 + [False] * 100
    sent = frames(CLICK + 1.0, words)
    voiced_at = [at for at, lvl in sent if lvl > 0]
    gone = set(voiced_at[10:13])
    agent_track = [(at + 0.18, 0.0 if at in gone else lvl) for at, lvl in sent]
    wire = tb.CallWire(
        heard,
        sent,
        [at for at, _ in sent],
        {"lost_on_wire": 0, "duplicates": 0, "reordered": 0, "expected": len(sent)},
        1,
    )
    agent = {
        "ok": True,
        "call_id": "c1",
        "t_click": CLICK,
        "t_ack": CLICK + 0.003,
        "t_first_agent_frame": MIC_FIRST,
        "agent_audio_start": MIC_FIRST + 0.19,
        "t_handback_click": CLICK + 5.0,
        "t_handback_ack": CLICK + 5.003,
        "takeover_api_ms": 3.0,
        "handback_api_ms": 3.0,
        "state_human_active_after_click_ms": 1.0,
    }
    return wire, {"agent": agent, "track": agent_track}


def test_a_takeover_record_has_every_measure() -> None:
    wire, parts = synthetic_takeover()
    kefu_rtp = {"asked": CLICK + 4.0, "received": 140, "lost": 0}
    rec = tb.takeover_record(
        wire,
        parts["agent"],
        wav_voiced=WAV,
        tracks=[frames(CLICK, [False] * 10), parts["track"]],
        kefu_rtp=kefu_rtp,
        transcripts={"thanks": "Thank you, Maria.", "q2": "do you take gift cards"},
    )
    assert rec["ok"] is True
    assert rec["bot_stop_ms"] == pytest.approx(120.0)
    assert rec["bot_talking_at_click"] is True
    assert rec["bot_frames_after_click"] == 7  # CLICK .. CLICK + 0.12
    assert rec["agent_path_ms"] == pytest.approx(200.0, abs=20.0)
    assert rec["first_agent_audio_ms"] == pytest.approx(4.0 + rec["agent_path_ms"], abs=0.2)
    assert rec["foreign_voiced_frames"] == 0
    assert rec["meets_100ms"] is False  # 120 ms > 100 ms
    assert rec["click_into_answer_ms"] == pytest.approx(1000.0)
    assert rec["q2_after_handback"] is True and rec["ai_spoke_before_q2"] is False
    assert rec["next_answer_latency_ms"] == pytest.approx(600.0)
    assert rec["handback_to_answer_ms"] == pytest.approx(3100.0)
    cf = rec["caller_frames"]
    assert cf["agent_track"] == 1 and cf["lag_ms"] == pytest.approx(180.0, abs=11.0)
    assert (cf["voiced_sent"], cf["heard_by_agent"], cf["lost"]) == (100, 97, 3)
    assert cf["kefu_rtp"]["sent_before_asked"] == 151  # CLICK + 1.0 .. CLICK + 4.0 inclusive
    assert cf["kefu_rtp"]["not_received"] == 11
    assert rec["asr"]["q2_recall"] == 1.0 and rec["asr"]["thanks_recall"] == pytest.approx(0.43)
    assert rec["downlink"]["skipped_frames"] == 0 and rec["downlink"]["ssrcs"] == 1

    summary = tb.summarize([rec, {**rec, "bot_stop_ms": 80.0, "meets_100ms": True}], [{}])
    assert summary["takeovers"] == 2 and summary["meets_100ms"] == 1
    assert summary["all_meet_100ms"] is False
    assert summary["bot_stop_ms"]["max"] == pytest.approx(120.0)
    assert summary["caller_frames"]["lost_to_agent"] == 6
    summary.update(concurrent_agents=1, rounds=1, load={"start": [1.0], "end": [2.0]})
    row = tb.table_row(summary)
    assert row.count("|") == tb.HEADER.splitlines()[0].count("|")
    assert "6 of 200" in row and "1/2" in row


def test_a_failed_agent_is_a_record_without_numbers() -> None:
    wire, _ = synthetic_takeover()
    error = {"step": "pick", "code": "no_live_call", "message": "none"}
    rec = tb.takeover_record(
        wire,
        {"ok": False, "error": error},
        wav_voiced=WAV,
        tracks=[],
        kefu_rtp=None,
        transcripts={},
    )
    assert rec["ok"] is False and rec["error"] == error
    assert rec["meets_100ms"] is False and "bot_stop_ms" not in rec
    summary = tb.summarize([rec], [])
    assert summary["measured"] == 0 and summary["bot_stop_ms"]["n"] == 0


def test_the_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    tb.add_arguments(parser)
    args = parser.parse_args(
        [
            "--target-sip",
            "sip:127.0.0.1:5070",
            "--target-http",
            "http://127.0.0.1:8080",
            "--concurrent-agents",
            "3",
            "--kefu-pid",
            "42",
        ]
    )
    s = tb.settings_from_args(args)
    assert (s.target_sip, s.cycles, s.agents, s.kefu_pid) == ("127.0.0.1:5070", 5, 3, 42)
    with pytest.raises(SystemExit):
        parser.parse_args(["--target-sip", "x", "--target-http", "y", "--cycles", "0"])


# --- the click's timing hook in run_agent ---------------------------------------------------


class FakeMedia:
    """The surface of RtcMedia, no WebRTC: joins at once, 'plays' the WAV instantly."""

    def __init__(self, pcm: np.ndarray) -> None:
        self.wav_seconds = len(pcm) / RATE
        self.play_at: float | None = None
        self.first_frame_at: float | None = None
        self.voice_at: float | None = None
        self.last_frame_at: float | None = None

    async def join(self, target: str, room: str, token: str, display: str) -> dict[str, Any]:
        return {"participant": "p1", "connect_s": 0.0}

    def play(self) -> None:
        self.play_at = self.first_frame_at = self.voice_at = self.last_frame_at = time.time()

    async def wait_played(self, within_s: float) -> bool:
        return True

    def heard(self) -> np.ndarray:
        return np.zeros(0, np.int16)

    def heard_tracks(self) -> int:
        return 0

    async def leave(self) -> None:
        return None

    async def close(self) -> None:
        return None


@pytest.fixture
async def fake_kefu() -> AsyncIterator[tuple[str, list[str]]]:
    """``/api/calls`` (one live call), its actions and an idle events stream; the log of
    actions in order."""
    log: list[str] = []
    readers: list[web.WebSocketResponse] = []
    new_state = {"takeover": "human_active", "handback": "ai_active"}

    async def calls(request: web.Request) -> web.Response:
        call = {"call_id": "c1", "state": "ai_active", "created": 1.0, "caller": "sip:a@b:1"}
        return web.json_response({"calls": [call]})

    async def action(request: web.Request) -> web.Response:
        what = request.match_info["action"]
        log.append(what)
        if what in new_state:  # the state change run_agent waits for before it closes
            event = {"type": "call.state_changed", "new": new_state[what], "at": time.time()}
            for ws in readers:
                await ws.send_json(event)
        return web.json_response({"status": "ok", "room": "call:c1"})

    async def events(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"v": 1, "type": "events.subscribed", "call_ids": ["c1"]})
        readers.append(ws)
        async for _ in ws:
            pass
        readers.remove(ws)
        return ws

    app = web.Application()
    app.router.add_get("/api/calls", calls)
    app.router.add_post("/api/calls/{call_id}/{action}", action)
    app.router.add_get("/api/events", events)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", log
    finally:
        await runner.cleanup()


async def test_run_agent_awaits_the_gate_between_listening_and_the_click(
    fake_kefu: tuple[str, list[str]], tmp_path: Any
) -> None:
    url, log = fake_kefu
    wav = tmp_path / "a.wav"
    write_wav(wav, np.zeros(960, np.int16))
    opts = Options(
        target=url,
        wav=wav,
        record=tmp_path / "heard.wav",
        call_id="c1",
        listen_s=0.0,
        hand_back=True,
        token="t",
        tail_s=0.0,
    )
    gate_saw: list[list[str]] = []

    async def gate() -> None:
        gate_saw.append(list(log))

    summary = await run_agent(opts, media_factory=FakeMedia, before_takeover=gate)
    assert summary["ok"], summary
    assert gate_saw == [["listen"]] and log == ["listen", "takeover", "handback"]

    async def refuse() -> None:
        raise AgentError("gate", "no_question", "never asked")

    log.clear()
    summary = await run_agent(opts, media_factory=FakeMedia, before_takeover=refuse)
    assert not summary["ok"] and summary["error"]["step"] == "gate"
    assert log == ["listen"]

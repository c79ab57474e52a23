"""``python -m loadtest agent``: arguments, which call it takes over, the order of its steps,
what its summary says, and how it fails.

kefu's agent API is an in-process aiohttp fake here (``/api/calls``, listen/takeover/handback,
``/api/events``) on loopback, and the WebRTC leg a fake with the same surface as
:class:`loadtest.agent_client.RtcMedia`; the microphone (:class:`AgentMic`) is tested on its own.
The run against kefu and a SIPp caller is the end-to-end suite's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
import wave
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import numpy as np
import pytest
from aiohttp import WSMsgType, web

from loadtest import agent_client
from loadtest.__main__ import main as loadtest_main
from loadtest.agent_client import AgentError, Options, error_line, pick_call, run_agent
from loadtest.webrtc_client import FRAME, RATE, write_wav

SECRET = "agent-client-test-secret-0123456789abcdef"
TAKEOVER_DELAY_S = 0.05
USER = web.RequestKey("user", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token(role: str = "agent", user: str = "alice") -> str:
    return jwt.encode({"sub": user, "role": role, "exp": time.time() + 600}, SECRET, "HS256")


def call(call_id: str, state: str, created: float, owner: str | None = None) -> dict[str, Any]:
    return {
        "call_id": call_id,
        "state": state,
        "channel": "sip",
        "source": "udp:127.0.0.1:5070",
        "caller": f"sip:{call_id}@127.0.0.1",
        "created": created,
        "answered": created + 0.5 if state != "ringing" else None,
        "codec": "PCMU",
        "rtp": None,
        "room": None,
        "owner": owner,
    }


# --- the fake kefu -----------------------------------------------------------------------


class FakeKefu:
    """kefu's ``/api/*`` for agents per /tmp/agent_api.md, in a thread with its own loop."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str, float]] = []
        """(method, path, UNIX time) of every request, in order."""
        self.readers: list[tuple[web.WebSocketResponse, set[str] | None]] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.url = ""

    def add(self, *calls: dict[str, Any]) -> None:
        for c in calls:
            self.calls[c["call_id"]] = c

    def paths(self) -> list[str]:
        return [f"{m} {p}" for m, p, _ in self.log]

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/api/calls", self._list)
        app.router.add_post("/api/calls/{call_id}/{action}", self._action)
        app.router.add_get("/api/events", self._events)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    @staticmethod
    def _error(status: int, code: str, message: str, **extra: Any) -> web.Response:
        return web.json_response(
            {"error": {"code": code, "message": message, **extra}}, status=status
        )

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.log.append((request.method, request.path, time.time()))
        header = request.headers.get("Authorization", "")
        try:
            claims = jwt.decode(header.removeprefix("Bearer "), SECRET, algorithms=["HS256"])
        except jwt.PyJWTError:
            return self._error(401, "unauthorized", "missing or invalid token")
        if claims["role"] == "customer":
            return self._error(403, "forbidden", "staff only")
        request[USER] = claims["sub"]
        return await handler(request)

    async def _list(self, request: web.Request) -> web.Response:
        return web.json_response({"calls": list(self.calls.values())})

    async def _publish(self, call_id: str, old: str, new: str, reason: str) -> None:
        event = {
            "v": 1,
            "type": "call.state_changed",
            "call_id": call_id,
            "at": round(time.time(), 3),
            "old": old,
            "new": new,
            "reason": reason,
        }
        for ws, ids in self.readers:
            if ids is None or call_id in ids:
                await ws.send_json(event)

    async def _action(self, request: web.Request) -> web.Response:
        call_id, action = request.match_info["call_id"], request.match_info["action"]
        found = self.calls.get(call_id)
        if found is None:
            return self._error(404, "unknown_call", "no such call")
        state = found["state"]
        if action == "listen":
            if state not in ("ai_active", "human_active"):
                return self._error(409, "wrong_state", "no media", state=state)
            found["room"] = f"call:{call_id}"
            return web.json_response({"room": found["room"]})
        if action == "takeover":
            await asyncio.sleep(TAKEOVER_DELAY_S)
            if state != "ai_active":
                return self._error(
                    409, "wrong_state", "taken", state=state, owner=found.get("owner")
                )
            found.update(state="human_active", owner=request[USER])
            await self._publish(call_id, state, "human_active", "takeover")
            return web.json_response({"status": "human_active", "room": f"call:{call_id}"})
        if action == "handback":
            if state != "human_active":
                return self._error(409, "wrong_state", "not human_active", state=state)
            found.update(state="ai_active", owner=None)
            await self._publish(call_id, state, "ai_active", "handback")
            return web.json_response({"status": "ai_active"})
        return self._error(404, "not_found", action)

    async def _events(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        ids = request.query.getall("call_id", [])
        entry = (ws, set(ids) if ids else None)
        self.readers.append(entry)
        self.log.append(("WS", f"/api/events?call_id={','.join(ids)}", time.time()))
        await ws.send_json(
            {"v": 1, "type": "events.subscribed", "queue_size": 256, "call_ids": ids or None}
        )
        # An event for another call, which the filter must keep out.
        await self._publish("someone-else", "ringing", "ai_active", "answered")
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                break
        self.readers.remove(entry)
        return ws


@pytest.fixture
def kefu() -> Iterator[FakeKefu]:
    fake = FakeKefu()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


# --- the fake WebRTC leg -----------------------------------------------------------------

LEAD_S = 0.04
"""The test WAV's leading silence: its first frames go out before its first voiced one."""


class FakeMedia:
    """RtcMedia's surface: joins at once, 'sends' the WAV in real time, 'hears' a tone."""

    instances: list[FakeMedia] = []

    def __init__(self, pcm: np.ndarray) -> None:
        self.wav_seconds = len(pcm) / RATE
        self.play_at: float | None = None
        self.first_frame_at: float | None = None
        self.voice_at: float | None = None
        self.last_frame_at: float | None = None
        self.joined: tuple[str, str, float] | None = None
        self.left_at: float | None = None
        self.closed = False
        FakeMedia.instances.append(self)

    async def join(self, target: str, room: str, token: str, display: str) -> dict[str, Any]:
        self.joined = (room, token, time.time())
        return {"type": "joined", "participant": "p-agent", "connect_s": 0.012}

    def play(self) -> None:
        self.play_at = time.time()
        self.first_frame_at = self.play_at + 0.01
        self.voice_at = self.first_frame_at + LEAD_S

    async def wait_played(self, within_s: float) -> bool:
        assert self.play_at is not None, "waiting for a WAV that was never started"
        await asyncio.sleep(self.wav_seconds)
        self.last_frame_at = time.time()
        return True

    def heard(self) -> np.ndarray:
        t = np.arange(RATE // 2) / RATE
        return (np.sin(2 * np.pi * 440 * t) * 1000).astype(np.int16)

    def heard_tracks(self) -> int:
        return 2

    async def leave(self) -> None:
        self.left_at = time.time()

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    """0.04 s of silence, then 0.16 s of a tone, at 16 kHz (the client resamples)."""
    rate = 16000
    t = np.arange(int(0.16 * rate)) / rate
    pcm = np.concatenate(
        [np.zeros(int(LEAD_S * rate), np.int16), (np.sin(2 * np.pi * 300 * t) * 8000)]
    )
    path = tmp_path / "agent.wav"
    write_wav(path, pcm.astype(np.int16), rate)
    return path


def options(kefu: FakeKefu, wav: Path, tmp_path: Path, **kw: Any) -> Options:
    defaults: dict[str, Any] = {"listen_s": 0.1, "token": token(), "tail_s": 0.1}
    defaults.update(kw)
    return Options(target=kefu.url, wav=wav, record=tmp_path / "heard.wav", **defaults)


async def run_fake(opts: Options) -> tuple[dict[str, Any], FakeMedia]:
    FakeMedia.instances.clear()
    summary = await run_agent(opts, media_factory=FakeMedia)
    json.dumps(summary)  # the summary is JSON as it is
    return summary, (FakeMedia.instances[-1] if FakeMedia.instances else None)  # type: ignore[return-value]


# --- arguments ---------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    agent_client.add_arguments(p)
    return p


BASE = ["--target", "http://127.0.0.1:8080", "--wav", "a.wav", "--record", "h.wav"]


def test_arguments_defaults_and_the_issue_s_spelling() -> None:
    args = parser().parse_args([*BASE, "--call", "c1"])
    assert (args.call_id, args.first, args.listen_s, args.hand_back) == ("c1", False, 2.0, False)
    assert args.token is None and args.json_out is None
    args = parser().parse_args(
        [*BASE, "--first", "--listen-s", "0.5", "--hand-back", "--json", "o.json", "--token", "T"]
    )
    assert (args.call_id, args.first, args.listen_s, args.hand_back) == (None, True, 0.5, True)
    assert (args.json_out, args.token) == ("o.json", "T")
    opts = agent_client.options_from_args(args)
    assert opts.call_id is None and opts.hand_back and opts.listen_s == 0.5 and opts.token == "T"


@pytest.mark.parametrize(
    "argv",
    [
        BASE,  # neither --call nor --first
        [*BASE, "--call", "c1", "--first"],  # both
        [*BASE, "--first", "--listen-s", "-1"],
        [*BASE, "--first", "--listen-s", "nan"],
        ["--first", "--wav", "a.wav", "--record", "h.wav"],  # no --target
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(argv)
    assert exc.value.code == 2


def test_the_subcommand_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        loadtest_main(["agent", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in ("--call", "--first", "--wav", "--record", "--listen-s", "--hand-back"):
        assert option in out


# --- picking the call --------------------------------------------------------------------


def test_first_picks_the_oldest_ai_active_call() -> None:
    calls = [
        call("new", "ai_active", 300.0),
        call("ringing", "ringing", 50.0),
        call("held", "human_active", 60.0, owner="bob"),
        call("old", "ai_active", 100.0),
        call("mid", "ai_active", 200.0),
        call("gone", "ended", 10.0),
    ]
    assert pick_call(calls, None)["call_id"] == "old"
    # --call takes the named call whatever its state: the server judges the takeover.
    assert pick_call(calls, "held")["call_id"] == "held"


def test_no_live_call_and_unknown_call_are_clear_errors() -> None:
    calls = [call("r", "ringing", 1.0), call("h", "human_active", 2.0, owner="bob")]
    with pytest.raises(AgentError) as exc:
        pick_call(calls, None)
    assert exc.value.info["code"] == "no_live_call"
    assert "1 human_active, 1 ringing" in exc.value.info["message"]
    with pytest.raises(AgentError) as exc:
        pick_call([], None)
    assert "calls: none" in exc.value.info["message"]
    with pytest.raises(AgentError) as exc:
        pick_call(calls, "nope")
    assert exc.value.info == {
        "step": "pick",
        "code": "unknown_call",
        "message": "call nope is not among kefu's 2 calls",
        "call_id": "nope",
    }


def test_error_lines_name_what_went_wrong() -> None:
    held = agent_client.http_error(
        "takeover",
        409,
        {"error": {"code": "wrong_state", "message": "x", "state": "human_active", "owner": "bob"}},
    ).info
    assert held == {
        "step": "takeover",
        "code": "wrong_state",
        "message": "x",
        "status": 409,
        "state": "human_active",
        "owner": "bob",
    }
    line = error_line(held)
    assert "held by bob" in line and "409" in line and "\n" not in line
    assert "token refused" in error_line(
        agent_client.http_error(
            "calls", 401, {"error": {"code": "unauthorized", "message": "m"}}
        ).info
    )
    odd = agent_client.http_error("listen", 502, "<html>bad gateway</html>").info
    assert odd["code"] == "http_502" and "bad gateway" in error_line(odd)


# --- the flow against the fake kefu ------------------------------------------------------


async def test_takeover_and_hand_back_in_order_with_timings(
    kefu: FakeKefu, wav: Path, tmp_path: Path
) -> None:
    kefu.add(call("newer", "ai_active", 200.0), call("c-old", "ai_active", 100.0))
    summary, media = await run_fake(options(kefu, wav, tmp_path, hand_back=True))

    assert summary["ok"], summary
    assert "error" not in summary and summary["errors"] == []
    assert (summary["call_id"], summary["room"], summary["picked"]) == (
        "c-old",
        "call:c-old",
        "first",
    )
    assert kefu.paths() == [
        "GET /api/calls",
        "GET /api/events",
        "WS /api/events?call_id=c-old",
        "POST /api/calls/c-old/listen",
        "POST /api/calls/c-old/takeover",
        "POST /api/calls/c-old/handback",
    ]
    # joined the room kefu named, with the agent's token, then listened before taking over
    assert media.joined is not None and media.joined[0] == "call:c-old"
    takeover_at = kefu.log[4][2]
    assert takeover_at - media.joined[2] >= 0.1
    # t_click just before the request, t_ack after the (50 ms slow) answer
    assert summary["takeover_status"] == 200
    assert summary["takeover_answer"] == {"status": "human_active", "room": "call:c-old"}
    assert summary["t_click"] <= takeover_at <= summary["t_ack"]
    assert summary["takeover_api_ms"] >= TAKEOVER_DELAY_S * 1000
    # the same interval on two clocks (a loaded box may switch tasks between the readings)
    assert summary["takeover_api_ms"] == pytest.approx(
        (summary["t_ack"] - summary["t_click"]) * 1000, abs=50
    )
    # the agent's audio starts only after the takeover is acknowledged
    assert media.play_at is not None and media.play_at >= summary["t_ack"] - 1e-3
    assert summary["t_first_agent_frame"] == pytest.approx(media.first_frame_at, abs=1e-3)
    assert summary["agent_audio_start"] == pytest.approx(media.voice_at, abs=1e-3)
    assert summary["t_ack"] <= summary["t_first_agent_frame"] < summary["agent_audio_start"]
    assert summary["first_agent_frame_after_ack_ms"] >= 0
    assert summary["agent_audio_start_after_click_ms"] >= summary["takeover_api_ms"]
    # hand-back: after the WAV's last frame plus the tail
    assert summary["handback_status"] == 200
    assert summary["t_handback_click"] >= summary["agent_audio_end"] + 0.1 - 1e-3
    assert summary["handback_api_ms"] > 0
    assert media.left_at is not None and media.left_at >= summary["t_handback_ack"] - 1e-3
    assert media.closed
    # events: only this call's, state changes with the server's times
    assert summary["events"] == ["events.subscribed", "call.state_changed", "call.state_changed"]
    assert [(s["old"], s["new"]) for s in summary["state_changes"]] == [
        ("ai_active", "human_active"),
        ("human_active", "ai_active"),
    ]
    assert summary["t_click"] <= summary["t_state_human_active"] <= summary["t_ack"] + 0.01
    assert summary["state_human_active_after_click_ms"] >= 0
    assert summary["t_state_ai_active"] >= summary["t_handback_click"] - 0.01
    # what was heard is in the record
    assert summary["heard_seconds"] == 0.5 and summary["heard_tracks"] == 2
    assert summary["heard_rms"] == pytest.approx(1000 / np.sqrt(2), rel=0.01)
    with wave.open(str(tmp_path / "heard.wav"), "rb") as heard:
        assert (heard.getframerate(), heard.getnframes()) == (RATE, RATE // 2)
    assert kefu.calls["c-old"]["state"] == "ai_active"


async def test_without_hand_back_the_call_stays_with_the_agent(
    kefu: FakeKefu, wav: Path, tmp_path: Path
) -> None:
    kefu.add(call("c1", "ai_active", 1.0), call("c2", "ai_active", 0.5))
    summary, _ = await run_fake(options(kefu, wav, tmp_path, call_id="c1"))
    assert summary["ok"] and summary["picked"] == "call" and summary["call_id"] == "c1"
    assert "handback_status" not in summary
    assert kefu.paths()[-1] == "POST /api/calls/c1/takeover"
    assert kefu.calls["c1"]["owner"] == "alice"
    assert summary["state_changes"][-1]["new"] == "human_active"


async def test_409_names_the_agent_who_holds_the_call(
    kefu: FakeKefu, wav: Path, tmp_path: Path
) -> None:
    kefu.add(call("c1", "human_active", 1.0, owner="bob"))
    summary, media = await run_fake(options(kefu, wav, tmp_path, call_id="c1", hand_back=True))
    assert summary["ok"] is False
    assert summary["error"] == {
        "step": "takeover",
        "code": "wrong_state",
        "message": "taken",
        "status": 409,
        "state": "human_active",
        "owner": "bob",
    }
    assert summary["takeover_status"] == 409
    assert "held by bob" in error_line(summary["error"])
    # nothing was played, nothing handed back; the room was left, the record still written
    assert media.play_at is None and summary["t_first_agent_frame"] is None
    assert summary["agent_audio_start"] is None
    assert kefu.paths()[-1] == "POST /api/calls/c1/takeover"
    assert media.left_at is not None and media.closed
    assert (tmp_path / "heard.wav").exists()
    assert kefu.calls["c1"]["owner"] == "bob"


async def test_unknown_call_and_no_live_call_stop_before_listening(
    kefu: FakeKefu, wav: Path, tmp_path: Path
) -> None:
    kefu.add(call("r1", "ringing", 1.0))
    summary, media = await run_fake(options(kefu, wav, tmp_path, call_id="nope"))
    assert not summary["ok"] and summary["error"]["code"] == "unknown_call"
    assert media is None and kefu.paths() == ["GET /api/calls"]
    summary, media = await run_fake(options(kefu, wav, tmp_path))
    assert not summary["ok"] and summary["error"]["code"] == "no_live_call"
    assert "1 ringing" in summary["error"]["message"]
    assert media is None
    assert summary["heard_seconds"] == 0 and (tmp_path / "heard.wav").exists()


async def test_a_call_without_media_is_refused_at_listen(
    kefu: FakeKefu, wav: Path, tmp_path: Path
) -> None:
    kefu.add(call("r1", "ringing", 1.0))
    summary, media = await run_fake(options(kefu, wav, tmp_path, call_id="r1"))
    assert summary["error"]["step"] == "listen"
    assert (summary["error"]["code"], summary["error"]["state"]) == ("wrong_state", "ringing")
    assert media is None and "takeover_status" not in summary


async def test_minted_token_is_an_agent_token_for_the_server_s_secret(
    kefu: FakeKefu, wav: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KEFU_AUTH_JWT_SECRET", raising=False)
    config = tmp_path / "kefu.toml"
    config.write_text(f'[auth]\njwt_secret = "{SECRET}"\n')
    kefu.add(call("c1", "ai_active", 1.0))
    summary, media = await run_fake(
        options(kefu, wav, tmp_path, token=None, config_path=str(config), user="agent-7")
    )
    assert summary["ok"], summary
    claims = jwt.decode(media.joined[1], SECRET, algorithms=["HS256"])  # type: ignore[index]
    assert (claims["sub"], claims["role"]) == ("agent-7", "agent")
    assert kefu.calls["c1"]["owner"] == "agent-7"


async def test_unreachable_target(wav: Path, tmp_path: Path) -> None:
    # A port held bound but not listening: connections are refused, and nobody can take it.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        target = f"http://127.0.0.1:{port}"
        opts = Options(target=target, wav=wav, record=tmp_path / "h.wav", token="t")
        summary, _ = await run_fake(opts)
    assert summary["error"]["code"] == "unreachable" and summary["error"]["step"] == "calls"


async def test_an_unreadable_wav_is_refused_before_anything(kefu: FakeKefu, tmp_path: Path) -> None:
    (tmp_path / "bad.wav").write_bytes(b"not a wav")
    for name in ("missing.wav", "bad.wav"):
        summary, media = await run_fake(options(kefu, tmp_path / name, tmp_path))
        assert (summary["error"]["step"], summary["error"]["code"]) == ("wav", "bad_wav")
        assert name in summary["error"]["message"] and media is None
    assert kefu.paths() == []


def test_cli_bad_token_prints_one_line_and_the_json(
    kefu: FakeKefu, wav: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kefu.add(call("c1", "ai_active", 1.0))
    out = tmp_path / "out.json"
    argv = ["agent", "--target", kefu.url, "--first", "--wav", str(wav)]
    argv += ["--record", str(tmp_path / "h.wav"), "--token", "not-a-jwt", "--json", str(out)]
    assert loadtest_main(argv) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary == json.loads(out.read_text())
    assert summary["ok"] is False
    assert summary["error"]["code"] == "unauthorized" and summary["error"]["status"] == 401
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "token refused" in lines[0] and "401" in lines[0]
    # a customer's token is refused as well
    argv[argv.index("not-a-jwt")] = token("customer")
    assert loadtest_main(argv) == 1
    assert "403 forbidden" in capsys.readouterr().err


# --- the microphone ----------------------------------------------------------------------


async def test_agent_mic_is_silent_until_play_then_marks_its_frames() -> None:
    lead = np.zeros(2 * FRAME, np.int16)
    voice = np.full(3 * FRAME, 3000, np.int16)
    mic = agent_client.agent_mic_class()(np.concatenate([lead, voice]))

    def samples(frame: Any) -> np.ndarray:
        return np.asarray(frame.to_ndarray()).reshape(-1)

    for _ in range(3):  # not playing: silence, and the WAV does not advance
        assert not samples(await mic.recv()).any()
    assert mic.first_frame_at is None and not mic.done.is_set()
    # From play() on the WAV plays in order: its silent lead, then the voice. (No wall-clock
    # bounds here: pacing is measured by the takeover benchmark, not asserted in a unit test.)
    mic.play()
    frames = [samples(await mic.recv()) for _ in range(5)]
    assert [bool(f.any()) for f in frames] == [False, False, True, True, True]
    assert all(f.size == FRAME for f in frames)
    assert mic.first_frame_at is not None
    assert mic.play_at <= mic.first_frame_at < mic.voice_at <= mic.last_frame_at
    assert mic.done.is_set()
    assert not samples(await mic.recv()).any()  # silence after the end
    mic.stop()

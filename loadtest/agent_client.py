"""``python -m loadtest agent``: a human agent takes over a live call, talks, hands it back.

::

    python -m loadtest agent --target http://HOST:PORT (--call CALL_ID | --first) \\
        --wav AGENT.wav --record HEARD.wav [--listen-s S] [--hand-back] [--json OUT]

The flow, as the agent workbench does it (the API is docs/events.md's ``/api/*``):

1. ``GET /api/calls``: the call named by ``--call``, or with ``--first`` the oldest
   (``created``) call in state ``ai_active``;
2. ``GET /api/events?call_id=ID`` (WebSocket), read until the end: every event's type, and the
   ``call.state_changed`` events with their ``at``;
3. ``POST /api/calls/ID/listen`` puts the call in the WebRTC room ``call:ID``; the agent joins
   it over ``/ws`` (:class:`loadtest.webrtc_client.WebRtcClient`) with a microphone that sends
   silence (:class:`AgentMic`) and hears the caller and the bot for ``--listen-s`` seconds;
4. ``POST /api/calls/ID/takeover``: ``t_click`` is the UNIX time just before the request,
   ``t_ack`` when its answer was read;
5. on a 200 the microphone switches to ``--wav`` (played once, paced in real time): the next
   20 ms frame is its first, and :class:`AgentMic` notes when that frame went to the encoder
   (``t_first_agent_frame``) and when the first non-silent one did (``agent_audio_start``);
6. 1 s after the WAV's last frame, ``POST /api/calls/ID/handback`` with ``--hand-back``;
   then leave. Everything heard (all remote tracks summed, mono 48 kHz) goes to ``--record``.

The times are UNIX times on this machine's clock, so they compare with a capture taken on the
same machine (the tests' SIP caller): last bot packet to the caller vs ``t_click``, first agent
packet at the caller vs ``t_first_agent_frame``.

The token is an ``agent`` JWT minted with the server's own HS256 secret, read as ``kefu token``
reads it (``--config`` / ``KEFU_*`` environment / ``[server] state_dir``), unless ``--token``
is given. A refusal (unknown call, no live call for ``--first``, a 409 naming the agent who
holds the call, a bad token) prints one line on stderr and the JSON summary with
``"ok": false`` and ``"error": {"step", "code", "message", "status", ...}`` (the server's own
error fields, ``state`` and ``owner`` included), and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import secrets
import sys
import time
import wave
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from loadtest.webrtc import RATE, ws_url

# aiortc (loadtest.webrtc_client) is imported only when a call runs, so that
# `python -m loadtest --help` stays fast.

LIVE_STATE = "ai_active"
"""The state ``--first`` looks for: a call the AI is handling."""
TAIL_S = 1.0
"""Seconds between the WAV's last frame and the hand-back (and leaving)."""
VOICE_PEAK = 100
"""A frame whose peak sample exceeds this (about -50 dBFS) is not silence."""
CONNECT_TIMEOUT_S = 10.0
EVENTS_SUBSCRIBE_TIMEOUT_S = 5.0
STATE_EVENT_GRACE_S = 1.0
"""How long to wait, before closing, for the ``call.state_changed`` of the last action."""
HTTP_TIMEOUT_S = 10.0


class AgentError(Exception):
    """A refusal that ends the run: ``info`` is the summary's ``error`` object."""

    def __init__(self, step: str, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.info: dict[str, Any] = {"step": step, "code": code, "message": message, **extra}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="kefu's HTTP base URL, http://HOST:PORT")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--call", dest="call_id", metavar="CALL_ID", help="the call to take over")
    which.add_argument(
        "--first", action="store_true", help=f"take over the oldest {LIVE_STATE} call"
    )
    parser.add_argument("--wav", required=True, help="the agent's microphone (16-bit PCM WAV)")
    parser.add_argument("--record", required=True, help="write what the agent heard here")
    parser.add_argument(
        "--listen-s",
        type=_non_negative,
        default=2.0,
        metavar="S",
        help="seconds of listening in the room before the takeover (default 2)",
    )
    parser.add_argument(
        "--hand-back", action="store_true", help="hand the call back to the AI after the WAV"
    )
    parser.add_argument("--token", default=None, help="agent JWT to use instead of minting one")
    parser.add_argument("--config", default=None, help="kefu config file for the JWT secret")
    parser.add_argument("--user", default=None, help="the minted token's agent (sub)")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def mint_agent_token(*, config_path: str | None = None, user: str | None = None) -> str:
    """An ``agent`` token (any room) signed with the server's secret, as ``kefu token``."""
    from kefu.mediaserver.config import jwt_secret, load_config
    from kefu.signaling.tokens import mint_token

    config = load_config(config_path)
    return mint_token(jwt_secret(config), user or f"loadtest-agent-{secrets.token_hex(3)}", "agent")


# --- picking the call --------------------------------------------------------------------


def pick_call(calls: list[dict[str, Any]], call_id: str | None) -> dict[str, Any]:
    """The call named ``call_id``, or (``None``) the oldest ``ai_active`` one; raises
    :class:`AgentError` ``unknown_call`` / ``no_live_call``."""
    if call_id is not None:
        for call in calls:
            if call.get("call_id") == call_id:
                return call
        raise AgentError(
            "pick",
            "unknown_call",
            f"call {call_id} is not among kefu's {len(calls)} calls",
            call_id=call_id,
        )
    live = [c for c in calls if c.get("state") == LIVE_STATE]
    if not live:
        states: dict[str, int] = {}
        for call in calls:
            state = str(call.get("state"))
            states[state] = states.get(state, 0) + 1
        seen = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
        raise AgentError(
            "pick", "no_live_call", f"no {LIVE_STATE} call to take over (calls: {seen})"
        )
    return min(live, key=lambda c: (_number(c.get("created")), str(c.get("call_id"))))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else float("inf")


# --- the HTTP API ------------------------------------------------------------------------


@dataclass
class ApiAnswer:
    status: int
    body: Any
    sent: float
    """UNIX time just before the request."""
    answered: float
    """UNIX time its answer was read."""
    ms: float
    """Request to answer, on the monotonic clock."""


class AgentApi:
    """``/api/*`` with the agent's token; non-2xx answers raise :class:`AgentError`."""

    def __init__(self, session: Any, target: str, token: str) -> None:
        self.session = session
        self.base = target.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}

    async def request(self, step: str, method: str, path: str) -> ApiAnswer:
        import aiohttp

        t0 = time.perf_counter()
        sent = time.time()
        try:
            async with self.session.request(
                method,
                self.base + path,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S),
            ) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AgentError(
                step, "unreachable", f"{method} {self.base}{path}: {exc!r}", status=None
            ) from exc
        answered = time.time()
        ms = (time.perf_counter() - t0) * 1000
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = text
        if not 200 <= status < 300:
            raise http_error(step, status, body)
        return ApiAnswer(status, body, sent, answered, round(ms, 2))

    async def calls(self) -> list[dict[str, Any]]:
        answer = await self.request("calls", "GET", "/api/calls")
        calls = answer.body.get("calls") if isinstance(answer.body, dict) else None
        if not isinstance(calls, list):
            raise AgentError("calls", "bad_answer", f"GET /api/calls answered {answer.body!r}")
        return [c for c in calls if isinstance(c, dict)]

    async def action(self, call_id: str, action: str) -> ApiAnswer:
        return await self.request(action, "POST", f"/api/calls/{call_id}/{action}")


def http_error(step: str, status: int, body: Any) -> AgentError:
    """kefu's ``{"error": {"code", "message", ...}}`` (or any other body) as an AgentError."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return AgentError(
            step, f"http_{status}", f"HTTP {status}: {str(body)[:200]}", status=status
        )
    extra = {k: v for k, v in error.items() if k not in ("code", "message")}
    code = str(error.get("code") or f"http_{status}")
    message = str(error.get("message") or "")
    return AgentError(step, code, message, status=status, **extra)


def error_line(error: dict[str, Any]) -> str:
    """One readable line for stderr."""
    step, code = error.get("step"), error.get("code")
    status = error.get("status")
    what = f"{status} {code}" if status else str(code)
    if step == "takeover" and code == "wrong_state" and error.get("owner"):
        return (
            f"agent: takeover refused: call is held by {error['owner']} "
            f"({what}, state {error.get('state')})"
        )
    if code == "wrong_state":
        return f"agent: {step} refused: the call is {error.get('state')} ({what})"
    if code in ("unauthorized", "forbidden"):
        return f"agent: {step}: token refused ({what}: {error.get('message')})"
    if code == "unknown_call" and status:
        return f"agent: {step}: no such call ({what})"
    return f"agent: {step}: {error.get('message') or code} ({what})"


# --- the events stream -------------------------------------------------------------------


class EventsWatch:
    """``/api/events`` filtered on one call, read in a task: every event, with the UNIX time
    it arrived (``received``)."""

    def __init__(self, session: Any, target: str, token: str, call_id: str) -> None:
        self.session = session
        base = target.rstrip("/")
        self.url = ws_url(base).removesuffix("/ws") + "/api/events"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.call_id = call_id
        self.events: list[dict[str, Any]] = []
        self.error: str | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ws: Any = None

    async def start(self) -> None:
        """Connect and wait for ``events.subscribed`` (failures land in ``error``)."""
        import aiohttp

        try:
            self._ws = await self.session.ws_connect(
                self.url, headers=self.headers, params={"call_id": self.call_id}
            )
            first = await self._ws.receive(timeout=EVENTS_SUBSCRIBE_TIMEOUT_S)
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.error = f"events: {exc!r}"
            return
        if first.type is not aiohttp.WSMsgType.TEXT:
            self.error = f"events: socket closed before subscribed (code {self._ws.close_code})"
            return
        self._note(first.data)
        if self.events[-1].get("type") != "events.subscribed":
            self.error = f"events: first message was {self.events[-1]!r}"
            return
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        import aiohttp

        async for msg in self._ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                break
            self._note(msg.data)

    def _note(self, text: str) -> None:
        try:
            event = json.loads(text)
        except ValueError:
            event = {"type": "?", "raw": text[:200]}
        if not isinstance(event, dict):
            event = {"type": "?", "raw": str(event)[:200]}
        event["received"] = time.time()
        self.events.append(event)
        self._changed.set()

    def state_event(self, new: str, since: float = 0.0) -> dict[str, Any] | None:
        for event in self.events:
            if (
                event.get("type") == "call.state_changed"
                and event.get("new") == new
                and event["received"] >= since
            ):
                return event
        return None

    async def wait_state(self, new: str, since: float, within_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + within_s
        while (found := self.state_event(new, since)) is None and self._task is not None:
            left = deadline - time.monotonic()
            if left <= 0 or self._task.done():
                break
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return found

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._ws is not None:
            await self._ws.close()


# --- the media ---------------------------------------------------------------------------


@functools.cache
def agent_mic_class() -> type:
    """The class AgentMic (built on aiortc's track, imported only when a call runs)."""
    from aiortc.mediastreams import MediaStreamError

    from kefu.sfu.forward import mono_frame
    from loadtest.webrtc_client import FRAME, PacedPcmTrack

    class AgentMic(PacedPcmTrack):
        """Silence until :meth:`play`, then the WAV once (paced), then silence.

        ``first_frame_at`` / ``voice_at`` / ``last_frame_at``: UNIX times at which the WAV's
        first frame, its first non-silent frame and its last frame left :meth:`recv` for the
        encoder (the RTP packet follows within the encode time, well under a millisecond).
        """

        def __init__(self, pcm: np.ndarray) -> None:
            super().__init__(pcm)
            self._playing = False
            self._silence = np.zeros(FRAME, np.int16)
            self.play_at: float | None = None
            self.first_frame_at: float | None = None
            self.voice_at: float | None = None
            self.last_frame_at: float | None = None
            self.done = asyncio.Event()

        def play(self) -> None:
            self._playing = True
            self.play_at = time.time()
            if len(self._pcm) == 0:
                self.done.set()

        async def recv(self) -> Any:
            if self.readyState != "live":
                raise MediaStreamError
            pts = await self._pacer.next_pts()
            # Chosen after the pacer's wait: a play() during it starts the WAV with this frame.
            start = self._pos
            if not self._playing or start >= len(self._pcm):
                return mono_frame(self._silence, pts, RATE)
            chunk = self._pcm[start : start + FRAME]
            self._pos += FRAME
            now = time.time()
            if self.first_frame_at is None:
                self.first_frame_at = now
            if self.voice_at is None and int(np.abs(chunk).max()) > VOICE_PEAK:
                self.voice_at = now
            if self._pos >= len(self._pcm):
                self.last_frame_at = now
                self.done.set()
                chunk = np.concatenate((chunk, self._silence[: FRAME - chunk.size]))
            return mono_frame(chunk, pts, RATE)

    return AgentMic


class Media(Protocol):
    """What the flow needs from the agent's WebRTC leg (a fake in the unit tests)."""

    wav_seconds: float

    @property
    def play_at(self) -> float | None: ...

    @property
    def first_frame_at(self) -> float | None: ...

    @property
    def voice_at(self) -> float | None: ...

    @property
    def last_frame_at(self) -> float | None: ...

    async def join(self, target: str, room: str, token: str, display: str) -> dict[str, Any]: ...

    def play(self) -> None: ...

    async def wait_played(self, within_s: float) -> bool: ...

    def heard(self) -> np.ndarray: ...

    def heard_tracks(self) -> int: ...

    async def leave(self) -> None: ...

    async def close(self) -> None: ...


class RtcMedia:
    """The agent in the call's room: :class:`WebRtcClient` with an :class:`AgentMic`."""

    def __init__(self, pcm: np.ndarray) -> None:
        from loadtest.webrtc_client import WebRtcClient

        self.mic = agent_mic_class()(pcm)
        # room for the listening, the WAV and the tail, whatever the WAV's length
        self.client = WebRtcClient(mic=self.mic, max_record_s=len(pcm) / RATE + 120.0)
        self.wav_seconds = len(pcm) / RATE

    @property
    def play_at(self) -> float | None:
        return self.mic.play_at  # type: ignore[no-any-return]

    @property
    def first_frame_at(self) -> float | None:
        return self.mic.first_frame_at  # type: ignore[no-any-return]

    @property
    def voice_at(self) -> float | None:
        return self.mic.voice_at  # type: ignore[no-any-return]

    @property
    def last_frame_at(self) -> float | None:
        return self.mic.last_frame_at  # type: ignore[no-any-return]

    async def join(self, target: str, room: str, token: str, display: str) -> dict[str, Any]:
        from loadtest.webrtc_client import NoRelayCandidates, SignalingRefused

        try:
            joined = await self.client.connect_ws(
                ws_url(target), room, token=token, display=display
            )
        except SignalingRefused as exc:
            raise AgentError("join", exc.code, str(exc), room=room) from exc
        except (NoRelayCandidates, TimeoutError, OSError) as exc:
            raise AgentError("join", "signaling_failed", repr(exc), room=room) from exc
        try:
            await asyncio.wait_for(self.client.connected.wait(), CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise AgentError(
                "join",
                "not_connected",
                f"not connected within {CONNECT_TIMEOUT_S:g} s "
                f"(ICE state {self.client.pc.iceConnectionState})",
                room=room,
            ) from None
        joined["connect_s"] = round(self.client.connect_time or 0.0, 3)
        return joined

    def play(self) -> None:
        self.mic.play()

    async def wait_played(self, within_s: float) -> bool:
        try:
            await asyncio.wait_for(self.mic.done.wait(), within_s)
        except TimeoutError:
            return False
        return True

    def heard(self) -> np.ndarray:
        return self.client.heard()

    def heard_tracks(self) -> int:
        return len(self.client.heard_by_track())

    async def leave(self) -> None:
        await self.client.leave()

    async def close(self) -> None:
        await self.client.close()


# --- the run -----------------------------------------------------------------------------


@dataclass
class Options:
    target: str
    wav: str | Path
    record: str | Path
    call_id: str | None = None
    """``None``: ``--first``."""
    listen_s: float = 2.0
    hand_back: bool = False
    token: str | None = None
    config_path: str | None = None
    user: str | None = None
    tail_s: float = TAIL_S


def _ms(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round((later - earlier) * 1000, 1)


async def run_agent(
    opts: Options,
    *,
    media_factory: Callable[[np.ndarray], Media] | None = None,
    before_takeover: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """The whole flow; returns the summary (refusals are ``ok: false`` + ``error``, never
    raised). ``media_factory`` builds the WebRTC leg from the WAV's samples (tests: a fake).
    ``before_takeover`` (in-process callers such as ``python -m loadtest takeover``) is
    awaited after the ``listen_s`` sleep, just before the click: it decides the moment of the
    takeover (an :class:`AgentError` it raises ends the run like any refusal)."""
    import aiohttp

    from loadtest.webrtc_client import read_wav, write_wav

    summary: dict[str, Any] = {
        "ok": False,
        "target": opts.target,
        "call_id": opts.call_id,
        "picked": "call" if opts.call_id else "first",
        "room": None,
        "listen_s": opts.listen_s,
        "hand_back": opts.hand_back,
        "errors": [],
    }
    media: Media | None = None
    events: EventsWatch | None = None
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        try:
            try:
                pcm = read_wav(opts.wav)
            except (OSError, EOFError, ValueError, wave.Error) as exc:
                raise AgentError("wav", "bad_wav", f"{opts.wav}: {exc}") from exc
            summary["wav_seconds"] = round(len(pcm) / RATE, 3)
            token = opts.token or _mint(opts)
            api = AgentApi(session, opts.target, token)
            call = pick_call(await api.calls(), opts.call_id)
            call_id = str(call["call_id"])
            summary["call_id"] = call_id
            summary["call"] = call

            events = EventsWatch(session, opts.target, token, call_id)
            await events.start()
            if events.error:
                summary["errors"].append(events.error)

            listen = await api.action(call_id, "listen")
            room = listen.body.get("room") if isinstance(listen.body, dict) else None
            summary["room"] = room = str(room or f"call:{call_id}")
            summary["listen_status"] = listen.status
            summary["listen_api_ms"] = listen.ms

            factory: Callable[[np.ndarray], Media] = media_factory or RtcMedia
            media = leg = factory(pcm)
            joined = await leg.join(opts.target, room, token, "Agent loadtest")
            summary["participant"] = joined.get("participant")
            summary["connect_s"] = joined.get("connect_s")
            await asyncio.sleep(opts.listen_s)
            if before_takeover is not None:
                await before_takeover()

            summary["t_click"] = round(time.time(), 4)
            try:
                takeover = await api.action(call_id, "takeover")
            except AgentError as exc:
                summary["takeover_status"] = exc.info.get("status")
                raise
            leg.play()
            summary.update(
                takeover_status=takeover.status,
                takeover_answer=takeover.body,
                t_click=round(takeover.sent, 4),
                t_ack=round(takeover.answered, 4),
                takeover_api_ms=takeover.ms,
            )
            if not await leg.wait_played(leg.wav_seconds + 5.0):
                summary["errors"].append("the WAV did not finish playing within its length + 5 s")
            await asyncio.sleep(opts.tail_s)

            if opts.hand_back:
                summary["t_handback_click"] = round(time.time(), 4)
                try:
                    handback = await api.action(call_id, "handback")
                except AgentError as exc:
                    summary["handback_status"] = exc.info.get("status")
                    raise
                summary.update(
                    handback_status=handback.status,
                    handback_answer=handback.body,
                    t_handback_click=round(handback.sent, 4),
                    t_handback_ack=round(handback.answered, 4),
                    handback_api_ms=handback.ms,
                )
            summary["ok"] = True
        except AgentError as exc:
            summary["error"] = exc.info
        except Exception as exc:  # noqa: BLE001 - the summary says what broke, never a traceback
            summary["error"] = {"step": "run", "code": "exception", "message": repr(exc)}
        finally:
            if media is not None:
                with contextlib.suppress(Exception):
                    await media.leave()
            if events is not None:
                await _settle_events(events, summary)
                await events.close()
            heard = media.heard() if media is not None else np.zeros(0, np.int16)
            tracks = media.heard_tracks() if media is not None else 0
            if media is not None:
                await media.close()
    write_wav(opts.record, heard)
    _timings(summary, media)
    summary["heard_seconds"] = round(len(heard) / RATE, 2)
    summary["heard_rms"] = round(
        float(np.sqrt(np.mean(heard.astype(np.float64) ** 2))) if heard.size else 0.0, 1
    )
    summary["heard_tracks"] = tracks
    summary["events"] = [e.get("type") for e in events.events] if events else []
    summary["state_changes"] = [
        {
            **{k: e.get(k) for k in ("at", "old", "new", "reason")},
            "received": round(e["received"], 4),
        }
        for e in (events.events if events else [])
        if e.get("type") == "call.state_changed"
    ]
    summary["seconds"] = round(time.monotonic() - started, 2)
    return summary


def _mint(opts: Options) -> str:
    try:
        return mint_agent_token(config_path=opts.config_path, user=opts.user)
    except Exception as exc:  # noqa: BLE001 - a missing/unreadable secret, a bad config file
        raise AgentError("token", "no_token", f"cannot mint an agent token: {exc}") from exc


async def _settle_events(events: EventsWatch, summary: dict[str, Any]) -> None:
    """Give the last action's ``call.state_changed`` a moment to arrive, then note when the
    state changes happened (the events' own ``at``: the server's clock)."""
    if summary.get("handback_status") == 200:
        await events.wait_state(LIVE_STATE, summary["t_handback_click"], STATE_EVENT_GRACE_S)
    elif summary.get("takeover_status") == 200:
        await events.wait_state("human_active", summary["t_click"], STATE_EVENT_GRACE_S)
    if "t_click" in summary:
        human = events.state_event("human_active", summary["t_click"])
        summary["t_state_human_active"] = human.get("at") if human else None
    if "t_handback_click" in summary:
        back = events.state_event(LIVE_STATE, summary["t_handback_click"])
        summary["t_state_ai_active"] = back.get("at") if back else None


def _timings(summary: dict[str, Any], media: Media | None) -> None:
    """The agent's audio marks (UNIX times) and the differences worth reading at a glance."""
    first = media.first_frame_at if media else None
    voice = media.voice_at if media else None
    summary["t_first_agent_frame"] = round(first, 4) if first else None
    summary["agent_audio_start"] = round(voice, 4) if voice else None
    last = media.last_frame_at if media else None
    summary["agent_audio_end"] = round(last, 4) if last else None
    summary["first_agent_frame_after_ack_ms"] = _ms(first, summary.get("t_ack"))
    summary["agent_audio_start_after_click_ms"] = _ms(voice, summary.get("t_click"))
    summary["state_human_active_after_click_ms"] = _ms(
        summary.get("t_state_human_active"), summary.get("t_click")
    )


def options_from_args(args: argparse.Namespace) -> Options:
    return Options(
        target=args.target,
        wav=args.wav,
        record=args.record,
        call_id=args.call_id,
        listen_s=args.listen_s,
        hand_back=args.hand_back,
        token=args.token,
        config_path=args.config,
        user=args.user,
    )


def main(args: argparse.Namespace) -> int:
    summary = asyncio.run(run_agent(options_from_args(args)))
    text = json.dumps(summary, indent=2, default=str)
    sys.stdout.write(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    if not summary["ok"]:
        sys.stderr.write(error_line(summary.get("error") or {}) + "\n")
        return 1
    return 0

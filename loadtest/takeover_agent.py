"""The agents of ``python -m loadtest takeover``: one per caller taken over, in this process.

Each runs :func:`loadtest.agent_client.run_agent` (the flow of ``python -m loadtest agent``)
on the call found in ``GET /api/calls`` by SIPp's SIP port in its From URI. The agent joins the
call's room at once and listens; once the caller's first ``transcript.final`` has come it waits
to hear the bot's answer in the room (``agent_heard_answer_ms`` after it began at the caller)
and clicks takeover ``--cut-in`` s later (about 1 s into the answer at the caller), plays
:data:`AGENT_LINE` (piper, noise 0) after :data:`AGENT_LEAD_S` of digital silence and followed
by :data:`AGENT_LISTEN_S` of silence, and hands back 1 s later. Its WebRTC client keeps every
received frame's arrival and RMS, per track (:func:`timed_client_class`).
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loadtest.takeover_frames import Frame, rms, voiced_flags
from loadtest.voice import ASR_RATE, VOICED_RMS

if TYPE_CHECKING:
    from loadtest.takeover_bench import Settings

AGENT_LINE = "Hello, this is Maria from the service team. I am taking over your call now."
AGENT_LEAD_S = 0.2
"""Digital silence before the agent's words: nothing voiced leaves the agent's microphone in
its first 10 frames, so no bot frame that arrives then can pass for the agent's."""
AGENT_LISTEN_S = 3.5
"""Silence after the agent's words (the caller thanks them meanwhile)."""
HANDBACK_TAIL_S = 1.0
CUT_IN_S = 0.8
"""Seconds from the agent hearing the bot's answer begin to the click (the room hears the
bot ~0.2 s after the caller does): about 1 s into the answer at the caller."""
ANSWER_HEARD_S = 15.0
FIND_CALL_S = 20.0
QUESTION_EVENT_S = 30.0


_FROM_PORT = re.compile(r"@[^:;>]+:(\d+)")


def from_port(uri: Any) -> int | None:
    """The port of a SIP URI's host part (``sip:sipp@127.0.0.1:6012`` → 6012)."""
    found = _FROM_PORT.search(str(uri or ""))
    return int(found.group(1)) if found else None


@functools.cache
def timed_client_class() -> type:
    """:class:`loadtest.webrtc_client.WebRtcClient` that also keeps, per received track, every
    frame's arrival (UNIX time) and RMS (aiortc is imported only when a round runs)."""
    from loadtest.webrtc_client import WebRtcClient

    class TimedClient(WebRtcClient):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.timed: list[list[Frame]] = []
            self._frames_of: dict[int, list[Frame]] = {}

        def _on_frame(self, track: Any, pcm: np.ndarray) -> None:
            frames = self._frames_of.get(id(track))
            if frames is None:
                frames = self._frames_of[id(track)] = []
                self.timed.append(frames)
            if len(frames) < self._max_frames:
                frames.append((time.time(), rms(pcm)))

    return TimedClient


def timed_media(pcm: np.ndarray) -> Any:
    """:class:`loadtest.agent_client.RtcMedia` whose client is a :func:`timed_client_class`."""
    from loadtest.agent_client import RtcMedia, agent_mic_class
    from loadtest.webrtc_client import RATE

    media = RtcMedia.__new__(RtcMedia)
    media.mic = agent_mic_class()(pcm)
    media.client = timed_client_class()(mic=media.mic, max_record_s=len(pcm) / RATE + 120.0)
    media.wav_seconds = len(pcm) / RATE
    return media


def agent_wav(voice: object, path: Path) -> list[bool]:
    """Write the agent's WAV (16 kHz); returns its voiced flags per 20 ms frame as the
    agent's microphone sends it (48 kHz frames of the resampled WAV)."""
    from kefu.ai_bridge.listen.heldout import speak, write_wav
    from loadtest.webrtc_client import FRAME, read_wav

    line = speak(voice, AGENT_LINE, noise_scale=0, noise_w_scale=0)
    lead = np.zeros(int(AGENT_LEAD_S * ASR_RATE), np.int16)
    tail = np.zeros(int(AGENT_LISTEN_S * ASR_RATE), np.int16)
    write_wav(path, np.concatenate([lead, line, tail]))
    return voiced_flags(read_wav(path), FRAME)


@dataclass
class AgentRun:
    """What one agent did: ``run_agent``'s summary, its tracks, kefu's RTP counters after."""

    index: int
    summary: dict[str, Any] = field(default_factory=dict)
    tracks: list[list[Frame]] = field(default_factory=list)
    kefu_rtp: dict[str, Any] | None = None
    bot_heard_at: float | None = None
    """When the agent first heard the bot's answer (the click is ``--cut-in`` s later)."""
    events: Any = None


async def _find_call(api: Any, port: int, within_s: float) -> str:
    from loadtest.agent_client import LIVE_STATE, AgentError

    deadline = time.monotonic() + within_s
    while True:
        for c in await api.calls():
            if from_port(c.get("caller")) == port and c.get("state") == LIVE_STATE:
                return str(c["call_id"])
        if time.monotonic() > deadline:
            raise AgentError(
                "pick", "no_live_call", f"no {LIVE_STATE} call from SIP port {port} in {within_s} s"
            )
        await asyncio.sleep(0.1)


async def _wait_event(events: Any, pred: Any, within_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for e in events.events:
            if pred(e):
                return dict(e)
        await asyncio.sleep(0.02)
    return None


def caller_track(tracks: Sequence[Sequence[Frame]]) -> tuple[int, float] | None:
    """Right after the caller's question was transcribed, the agent's track of the caller:
    the one whose last voiced frame is the latest (the question was the last thing said),
    and that frame's arrival. None with fewer than two tracks (the bot's is missing)."""
    if len(tracks) < 2:
        return None
    last = [max((at for at, lv in t if lv >= VOICED_RMS), default=-1.0) for t in tracks]
    i = int(np.argmax(last))
    return i, last[i]


def voiced_after(tracks: Sequence[Sequence[Frame]], skip: int, since: float) -> float | None:
    """The first voiced frame after ``since`` on any track but ``skip``."""
    found = [
        at
        for i, t in enumerate(tracks)
        if i != skip
        for at, lv in t
        if lv >= VOICED_RMS and at > since
    ]
    return min(found) if found else None


async def _wait_bot_heard(tracks: Sequence[Sequence[Frame]], within_s: float) -> float | None:
    """When the agent first heard the bot's answer (a voiced frame on a track other than the
    caller's, chosen when the wait begins), polled every 20 ms; None if not within_s."""
    picked = caller_track(tracks)
    if picked is None:
        return None
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        heard = voiced_after(tracks, *picked)
        if heard is not None:
            return heard
        await asyncio.sleep(0.02)
    return None


async def run_call_agent(
    s: Settings, session: Any, run: AgentRun, port: int, token: str, wav: Path, workdir: Path
) -> None:
    """One agent on the call from SIP port ``port``: find it, watch its events, take it over
    once the bot's answer is heard (``run_agent``'s gate), hand it back; the results land in
    ``run``."""
    from loadtest.agent_client import (
        AgentApi,
        AgentError,
        EventsWatch,
        Options,
        run_agent,
    )

    api = AgentApi(session, s.target_http, token)
    try:
        call_id = await _find_call(api, port, FIND_CALL_S)
    except AgentError as exc:
        run.summary = {"ok": False, "error": exc.info}
        return
    events = EventsWatch(session, s.target_http, token, call_id)
    await events.start()
    run.events = events

    media: list[Any] = []

    async def gate() -> None:
        asked = await _wait_event(
            events,
            lambda e: (
                e.get("type") == "transcript.final"
                and e.get("speaker") == "caller"
                and int(e.get("turn_id") or 0) >= 1
            ),
            QUESTION_EVENT_S,
        )
        if asked is None:
            raise AgentError("gate", "no_question", "the caller's question was never transcribed")
        tracks = media[0].client.timed if media else []
        heard = await _wait_bot_heard(tracks, ANSWER_HEARD_S)
        if heard is None:
            raise AgentError("gate", "no_answer", "the agent never heard the bot answer")
        run.bot_heard_at = heard
        await asyncio.sleep(s.cut_in_s)

    def factory(pcm: np.ndarray) -> Any:
        media.append(timed_media(pcm))
        return media[-1]

    opts = Options(
        target=s.target_http,
        wav=wav,
        record=workdir / f"agent{run.index:02d}.wav",
        call_id=call_id,
        listen_s=0.0,
        hand_back=True,
        token=token,
        tail_s=HANDBACK_TAIL_S,
    )
    run.summary = await run_agent(opts, media_factory=factory, before_takeover=gate)
    if media:
        run.tracks = [list(t) for t in media[0].client.timed]
    asked = time.time()
    try:
        calls = await api.calls()
    except AgentError:
        return
    for c in calls:
        if c.get("call_id") == call_id and isinstance(c.get("rtp"), dict):
            run.kefu_rtp = {"asked": asked, **c["rtp"]}

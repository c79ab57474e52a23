"""Shared pieces for the agent tests: the real models (loaded once), a caller, a sender.

The caller is a fake inbound track that plays piper-spoken questions as 8 kHz s16 frames
(what a G.711 leg delivers) paced in real time; the sender pulls the agent's outbound track
at real time, as kefu's RtpSender does, and can fast-forward through audio whose timing no
longer matters (the rest of an answer already measured), which keeps the suite quick.
"""

from __future__ import annotations

import asyncio
import fractions
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import av
import numpy as np
import pytest
import pytest_asyncio
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kefu.ai_bridge.agent import CallAgent  # noqa: E402
from kefu.ai_bridge.services import AiServices, AiSettings  # noqa: E402
from kefu.codecs.resample import resample  # noqa: E402

CALLER_RATE = 8000


def trim(pcm: np.ndarray, threshold: int = 300) -> np.ndarray:
    """Cut leading/trailing near-silence so a segment's first sample is its speech onset."""
    loud = np.nonzero(np.abs(pcm.astype(np.int32)) > threshold)[0]
    return pcm[loud[0] : loud[-1] + 1] if loud.size else pcm


class FakeCaller(MediaStreamTrack):
    """8 kHz mono s16 (or ``rate``/``channels``: packed s16, the voice in every channel), 20 ms
    frames in real time; silence between what it is told to say."""

    kind = "audio"

    def __init__(self, rate: int = CALLER_RATE, channels: int = 1) -> None:
        super().__init__()
        self.rate, self.channels, self.frame = rate, channels, rate // 50
        self._buf: deque[np.ndarray] = deque()
        self._pending_starts: deque[int] = deque()  # sample offsets of segment onsets
        self._queued = 0
        self._consumed = 0
        self._anchor: float | None = None
        self._pts = 0
        self.frames_read = 0
        """Frames handed to whoever reads this track."""
        self.said_at: list[float] = []
        """Loop time each ``say`` segment's first sample was delivered (its audio time)."""
        self.idle = asyncio.Event()
        self.idle.set()

    def say(self, pcm16k: np.ndarray) -> None:
        pcm = resample(trim(pcm16k), 16000, self.rate).astype(np.int16)
        self._pending_starts.append(self._consumed + self._queued)
        self._buf.append(pcm)
        self._queued += len(pcm)
        self.idle.clear()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        if self._anchor is None:
            self._anchor = loop.time()
        else:
            wait = self._anchor + self._pts / self.rate - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
        if self.readyState != "live":
            raise MediaStreamError
        size = self.frame
        out = np.zeros(size, np.int16)
        filled = 0
        while self._buf and filled < size:
            head = self._buf[0]
            n = min(size - filled, len(head))
            out[filled : filled + n] = head[:n]
            if n == len(head):
                self._buf.popleft()
            else:
                self._buf[0] = head[n:]
            filled += n
        now = loop.time()
        while self._pending_starts and self._pending_starts[0] < self._consumed + filled:
            offset = self._pending_starts.popleft() - self._consumed
            # The frame's audio spans (now - 20 ms, now]: onset time within it.
            self.said_at.append(now - (size - offset) / self.rate)
        self._consumed += filled
        self._queued -= filled
        if not self._buf:
            self.idle.set()
        packed = np.repeat(out, self.channels).reshape(1, -1)  # interleaved channels
        layout = "mono" if self.channels == 1 else "stereo"
        frame = av.AudioFrame.from_ndarray(packed, format="s16", layout=layout)
        frame.sample_rate = self.rate
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, self.rate)
        self._pts += size
        self.frames_read += 1
        return frame


@dataclass
class SentFrame:
    at: float
    pcm: np.ndarray
    speech: bool


class FakeSender:
    """Pulls a track at real time (20 ms per frame) and records every frame."""

    def __init__(self, track: MediaStreamTrack) -> None:
        self.track = track
        self.frames: list[SentFrame] = []
        self.fast = False
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        anchor = loop.time()
        n = 0
        while True:
            if not self.fast:
                wait = anchor + n * 0.02 - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                elif wait < -0.1:
                    anchor, n = loop.time(), 0
            else:
                await asyncio.sleep(0)
                anchor, n = loop.time(), 0
            try:
                frame = await self.track.recv()
            except MediaStreamError:
                return
            n += 1
            pcm = frame.to_ndarray().reshape(-1)
            self.frames.append(SentFrame(loop.time(), pcm, bool(np.any(pcm))))
            self._changed.set()

    async def wait_for(self, predicate: Callable[[], bool], within: float = 20.0) -> None:
        async def loop_until() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop_until(), within)

    async def fast_forward(self, agent: CallAgent, within: float = 20.0) -> None:
        """Pull without pacing until the agent has nothing left to say."""
        self.fast = True
        try:
            await self.wait_for(lambda: not agent.busy, within)
        finally:
            self.fast = False

    def speech_frames_after(self, t: float) -> list[SentFrame]:
        return [f for f in self.frames if f.at > t and f.speech]

    def audio_between(self, t0: float, t1: float = float("inf")) -> np.ndarray:
        parts = [f.pcm for f in self.frames if t0 < f.at <= t1]
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


@dataclass
class Bus:
    """What the agent publishes, with a way to wait for a kind of event."""

    events: list[object] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    readers: list[Callable[[object], None]] = field(default_factory=list)
    """Sinks called with every event, as the server's bus calls the AI's metrics and log."""

    def __call__(self, event: object) -> None:
        for reader in self.readers:
            reader(event)
        self.events.append(event)
        self.changed.set()

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait(
        self, kind: type, pred: Callable[[object], bool] = lambda e: True, within: float = 20.0
    ) -> object:
        async def loop_until() -> object:
            while True:
                for e in self.events:
                    if isinstance(e, kind) and pred(e):
                        return e
                self.changed.clear()
                await self.changed.wait()

        return await asyncio.wait_for(loop_until(), within)


@dataclass
class Call:
    agent: CallAgent
    caller: FakeCaller
    sender: FakeSender
    bus: Bus


@pytest.fixture(scope="session")
def piper_voice():
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


@pytest.fixture(scope="session")
def spoken(piper_voice) -> Callable[..., np.ndarray]:
    """Text → 16 kHz int16 piper speech (cached per text and speed), the same every run:
    piper draws new noise on each synthesis, and one draw in many made tiny.en mishear."""
    from kefu.ai_bridge.listen.heldout import speak

    cache: dict[tuple[str, float], np.ndarray] = {}

    def get(text: str, length_scale: float = 1.0) -> np.ndarray:
        key = (text, length_scale)
        if key not in cache:
            cache[key] = speak(
                piper_voice, text, length_scale=length_scale, noise_scale=0, noise_w_scale=0
            )
        return cache[key]

    return get


@pytest.fixture(scope="session")
def ai_settings(tmp_path_factory: pytest.TempPathFactory) -> AiSettings:
    root = tmp_path_factory.mktemp("agent")
    return AiSettings(
        language="en",
        cache_dir=os.environ["KEFU_AI_CACHE_DIR"],  # the session's (tests/conftest.py)
        interaction_log=str(root / "interactions.jsonl"),
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def services(ai_settings: AiSettings) -> AsyncIterator[AiServices]:
    from prometheus_client import CollectorRegistry

    svc = await AiServices.start(ai_settings, registry=CollectorRegistry())
    assert svc.ready, svc.readiness()
    yield svc
    await svc.close()


@pytest.fixture
def make_call() -> Callable[..., object]:
    """Start a call (agent + caller + sender); every call is closed at the end of the test."""
    calls: list[Call] = []

    async def make(services: AiServices, **kwargs: object) -> Call:
        caller = FakeCaller()
        bus = Bus(readers=services.event_readers())
        agent = CallAgent(
            services,
            f"test-{len(calls)}-{id(caller)}",
            caller,
            publish=bus,
            paced_output=False,
            **kwargs,
        )
        sender = FakeSender(agent.outbound)
        call = Call(agent, caller, sender, bus)
        calls.append(call)
        await agent.start()
        sender.start()
        return call

    make.calls = calls  # type: ignore[attr-defined]
    return make


@pytest_asyncio.fixture(loop_scope="session")
async def call_factory(make_call) -> AsyncIterator[Callable[..., object]]:
    yield make_call
    for call in make_call.calls:
        await call.agent.close()
        if call.agent.services.llm is not None:
            await call.agent.services.llm.close()
        await call.sender.stop()
        call.caller.stop()


@pytest.fixture(scope="session")
def hear() -> Callable[[AiServices, np.ndarray], str]:
    """Transcribe the bot's audio (22.05 kHz) with the same Whisper the agent uses."""

    def transcribe(services: AiServices, pcm22k: np.ndarray) -> str:
        from kefu.ai_bridge.tracks import OUTPUT_RATE

        pcm16 = resample(pcm22k.astype(np.int16), OUTPUT_RATE, 16000).astype(np.int16)
        assert services.asr is not None
        return services.asr.transcribe_sync(pcm16).text  # type: ignore[attr-defined]

    return transcribe

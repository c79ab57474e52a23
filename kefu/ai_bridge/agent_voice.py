"""A human agent's voice during a takeover, transcribed for the record and the co-pilot.

While a human has the call (:meth:`kefu.ai_bridge.agent.CallAgent.pause`) the AI keeps
transcribing the caller; :meth:`~kefu.ai_bridge.agent.CallAgent.hear_agent` adds this second,
lighter listen stage on what the agent says (in production the mix of the agents' voices the
caller hears). It is the same :class:`~kefu.ai_bridge.listen.listener.Listener` as the caller's
(Silero VAD endpointing, the call's ASR engine, whose one executor thread queues its decodes
with the caller's), built by :func:`~kefu.ai_bridge.pipeline.build_listener` without partial
transcripts, barge-in cue or speculative decodes: nobody waits to answer the agent.

Each final transcript becomes an :class:`~kefu.ai_bridge.events.Utterance` with speaker
``agent`` (its ``turn_id`` is the caller's current turn) and a line of the dialog history, so
the AI has the whole conversation when the call is handed back. Nothing heard here is ever
answered: this class cannot speak.

One task owns everything (the listener, the tap on the track, the endpointer's timer);
:meth:`AgentVoice.stop` cancels it and its ``finally`` releases them. A turn still open or
being decoded when it stops is not transcribed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.ai_bridge.events import Utterance
from kefu.ai_bridge.listen.listener import FinalTranscript, Listener
from kefu.ai_bridge.pipeline import PipelineUnavailable, StageContext, build_listener
from kefu.ai_bridge.stages import ListenDriver
from kefu.ai_bridge.tracks import CallerAudioTap

__all__ = ["AgentHearing", "AgentVoice"]

log = structlog.get_logger(__name__)


class AgentVoice:
    """Transcribes ``track`` (any rate and layout) as the words of a human agent, ``who``."""

    def __init__(
        self,
        ctx: StageContext,
        track: MediaStreamTrack,
        who: str,
        *,
        publish: Callable[[object], None],
        turn_id: Callable[[], int],
        record: Callable[[str, str, str], None],
    ) -> None:
        self.ctx = ctx
        self.track = track
        self.who = who
        """Who is speaking (the agent's name or id): for the logs."""
        self.publish = publish
        self._turn_id = turn_id
        """The caller's current turn (0: none yet), the one an agent line belongs to."""
        self._record = record
        """``(speaker, text, lang)`` into the dialog history (never blocks)."""
        self.listener: Listener | None = None
        self.lines = 0
        """Agent lines published."""
        self.listening = asyncio.Event()
        """Set once the track is being read (the listener is built)."""
        self.stopped = asyncio.Event()
        """Set once the track is no longer read and the listener is closed."""
        self._task: asyncio.Task[None] | None = None
        self._log = log.bind(call_id=ctx.call_id, who=who)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"agent-voice:{self.ctx.call_id}"
            )
            self._task.add_done_callback(lambda _: self.stopped.set())

    def stop(self) -> asyncio.Task[None] | None:
        """Stop listening (idempotent); returns the task still finishing, for its owner."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            return task
        return None

    async def _run(self) -> None:
        driver: ListenDriver | None = None
        tap: CallerAudioTap | None = None
        try:
            listener = self.listener = await build_listener(
                self.ctx, barge_in=False, speculative=False
            )
            driver = ListenDriver(listener)
            tap = CallerAudioTap(self.track, driver.feed, call_id=self.ctx.call_id)
            tap.start()
            self.listening.set()
            self._log.info("agent_voice_listening")
            while True:
                event = await listener.events.get()
                if isinstance(event, FinalTranscript):
                    try:
                        self._on_final(event)
                    except Exception:  # one bad line must not deafen the rest of the call
                        self._log.exception("agent_voice_line_failed", turn_id=event.turn_id)
        except PipelineUnavailable as exc:
            self._log.error("agent_voice_unavailable", error=str(exc))
        finally:
            if driver is not None:
                driver.close()
            if tap is not None:
                await tap.stop()
            if self.listener is not None:
                await self.listener.close()
            self._log.info("agent_voice_stopped", lines=self.lines)

    def _on_final(self, ev: FinalTranscript) -> None:
        text = ev.text.strip()
        if not text:
            return
        turn_id = self._turn_id()
        self.lines += 1
        self._log.info("agent_said", turn_id=turn_id, chars=len(text))
        self.publish(Utterance(self.ctx.call_id, turn_id, "agent", text, ev.language, ev.at))
        self._record("agent", text, ev.language)


class AgentHearing:
    """A call's agent voice, one at a time: :meth:`hear` replaces the one being heard,
    :meth:`stop` is idempotent, :meth:`close` (at hang-up) waits for every stop to finish."""

    def __init__(
        self,
        ctx: StageContext,
        *,
        publish: Callable[[object], None],
        turn_id: Callable[[], int],
        record: Callable[[str, str, str], None],
    ) -> None:
        self.ctx = ctx
        self._publish, self._turn_id, self._record = publish, turn_id, record
        self.voice: AgentVoice | None = None
        """The voice being heard (None: none)."""
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    def hear(self, track: MediaStreamTrack, who: str) -> None:
        if self._closed:
            return
        self.stop()
        self.voice = AgentVoice(
            self.ctx,
            track,
            who,
            publish=self._publish,
            turn_id=self._turn_id,
            record=self._record,
        )
        self.voice.start()

    def stop(self) -> None:
        voice, self.voice = self.voice, None
        task = voice.stop() if voice is not None else None
        if task is not None:
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        self._closed = True
        self.stop()
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task

"""One call's avatar weights stream: speech chunks and floor events in, 60-byte frames out.

:class:`AvatarStream` owns the call's :class:`~.face.FaceDriver` and
:class:`~.wire.FrameEncoder`. Its :meth:`~AvatarStream.tap` is a speech tap
(:class:`kefu.ai_bridge.stages.SpeechTap`): each ``TtsChunk``'s phoneme marks become a
:class:`~.lipsync.SpeechClip` that starts when the chunk will start playing (now plus the bot
audio already queued ahead of it on the outbound track). :meth:`~AvatarStream.run` is the
pump: at ``fps`` it asks the face for the frame at ``now`` and hands the encoded frame to
``send`` (the room bot's ``publish_binary``, which drops rather than queues).

Times given to the face are the event loop's clock (the outbound track is paced on it); the
frame's timestamp is the bot audio's media clock (:meth:`BotAudioTrack.media_s`). Nothing here
blocks: a tap is one lip-sync computation of a clause (well under a millisecond per second of
speech), a frame is one small vector sum.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from kefu.ai_bridge.avatar.face import FaceConfig, FaceDriver, FaceMode
from kefu.ai_bridge.avatar.lipsync import speech_clip
from kefu.ai_bridge.avatar.visemes import Notation
from kefu.ai_bridge.avatar.wire import FrameEncoder, FrameFlags
from kefu.ai_bridge.barge import FloorAction
from kefu.ai_bridge.speak.base import TtsChunk
from kefu.errors import InvalidTransition

__all__ = ["AvatarStream", "BotClock", "attach_room_avatar"]

log = structlog.get_logger(__name__)


class BotClock(Protocol):
    """What the stream reads of the outbound ``BotAudioTrack``."""

    @property
    def queued_s(self) -> float: ...

    def media_s(self, now: float) -> float: ...


class AvatarStream:
    """The avatar of one call (see module doc). ``clock`` is the loop's clock by default."""

    def __init__(
        self,
        track: BotClock,
        send: Callable[[bytes], None],
        *,
        fps: float = 30.0,
        notation: Notation = Notation.IPA,
        face: FaceConfig | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if fps <= 0:
            raise ValueError("fps must be positive")
        self.track = track
        self.send = send
        self.fps = fps
        self.notation = notation
        self._clock = clock
        self._sleep = sleep
        self.face = FaceDriver(face, start_s=self._now())
        self.encoder = FrameEncoder()
        self.frames_sent = 0
        self._task: asyncio.Task[None] | None = None

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    # -- inputs ------------------------------------------------------------------------------

    def tap(self, chunk: TtsChunk, turn_id: int | None) -> TtsChunk:
        """The speech tap: lip-sync ``chunk`` from when its first sample will play."""
        if chunk.phonemes:
            start_s = self._now() + self.track.queued_s
            clip = speech_clip(
                chunk.phonemes,
                start_s,
                fps=self.fps,
                duration_ms=chunk.duration_ms,
                notation=self.notation,
            )
            self.face.speak(clip)
        return chunk

    def caller_started(self) -> None:
        self._safely(self.face.caller_started)

    def caller_stopped(self) -> None:
        self._safely(self.face.caller_stopped)

    def barge_in(self) -> None:
        """The bot's audio was flushed: the next frame shows the mouth at rest."""
        now = self._now()
        self._safely(lambda: self.face.barge_in(now))

    def on_floor(self, action: FloorAction) -> None:
        """Follow the barge-in table's action on the bot's audio (the agent's ``_act``)."""
        now = self._now()
        if action is FloorAction.HOLD:
            self._safely(lambda: self.face.hold(now))
        elif action is FloorAction.BACKCHANNEL:
            self._safely(lambda: self.face.resume(now))
        elif action in (FloorAction.BARGE_IN, FloorAction.SILENCE):
            self.barge_in()

    def _safely(self, event: Callable[[], None]) -> None:
        try:
            event()
        except InvalidTransition:  # the face must never break the call
            log.warning("avatar_event_ignored", mode=self.face.mode.value, exc_info=True)

    # -- output ------------------------------------------------------------------------------

    def frame(self, now: float) -> bytes:
        """The encoded frame at ``now`` (advances the face and the sequence)."""
        weights = self.face.advance(now)
        flags = FrameFlags.NONE
        if self.face.take_reset():
            flags |= FrameFlags.RESET
        if self.face.mode is FaceMode.SPEAKING:
            flags |= FrameFlags.SPEAKING
        elif self.face.mode is FaceMode.LISTENING:
            flags |= FrameFlags.LISTENING
        timestamp_ms = round(self.track.media_s(now) * 1000)
        return self.encoder.encode(weights, timestamp_ms, flags)

    async def run(self) -> None:
        """Send a frame every ``1 / fps`` seconds until cancelled (frames due while the loop
        was busy are skipped, never sent in a burst)."""
        period = 1.0 / self.fps
        next_at = self._now()
        while True:
            now = self._now()
            if now >= next_at:
                self.send(self.frame(now))
                self.frames_sent += 1
                next_at += period * max(1, math.floor((now - next_at) / period) + 1)
            await self._sleep(max(0.0, next_at - self._now()))

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="avatar-pump")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def attach_room_avatar(agent: Any, send: Callable[[bytes], None]) -> AvatarStream | None:
    """Give a web room's :class:`~kefu.ai_bridge.agent.CallAgent` an avatar whose frames go to
    ``send`` (the room bot's ``publish_binary``) and start its pump; None when the agent's
    settings say ``avatar = "off"`` or it cannot take one. The agent's ``close`` stops it."""
    settings = getattr(agent, "settings", None)
    if getattr(settings, "avatar", "off") != "weights" or not hasattr(agent, "attach_avatar"):
        return None
    stream = AvatarStream(agent.outbound, send)
    agent.attach_avatar(stream)
    stream.start()
    return stream

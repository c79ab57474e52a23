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
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from kefu.ai_bridge.avatar.expression import UnknownEmotion
from kefu.ai_bridge.avatar.face import FaceConfig, FaceDriver, FaceMode
from kefu.ai_bridge.avatar.lipsync import envelope_clip, speech_clip
from kefu.ai_bridge.avatar.quality import Quality, Step
from kefu.ai_bridge.avatar.video import AvatarVideo
from kefu.ai_bridge.avatar.visemes import Notation
from kefu.ai_bridge.avatar.wire import FrameEncoder, FrameFlags
from kefu.ai_bridge.barge import FloorAction
from kefu.ai_bridge.events import AvatarQualityChanged
from kefu.ai_bridge.speak.base import TtsChunk
from kefu.errors import InvalidTransition
from kefu.sfu.video import VideoFanout

__all__ = ["AvatarStream", "BotClock", "attach_room_avatar"]

log = structlog.get_logger(__name__)

EMOTION_INTENSITY = 0.8
"""How strongly the face shows the reply's tone (1: the full poses of docs/avatar.md)."""


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
        self._emotions: list[tuple[float, str]] = []
        """(start time, emotion) of replies queued to play: the face follows the voice."""
        self._next_emotion: str | None = None
        self.video: AvatarVideo | None = None
        """The rendered video of this face (None: weights only); fed the same frames."""
        self._task: asyncio.Task[None] | None = None

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    # -- inputs ------------------------------------------------------------------------------

    def reply_emotion(self, emotion: str) -> None:
        """The tone of the reply about to be synthesized: the face takes it on when that
        reply's first chunk starts playing (an emotion sink of the responder)."""
        self._next_emotion = emotion

    def tap(self, chunk: TtsChunk, turn_id: int | None) -> TtsChunk:
        """The speech tap: lip-sync ``chunk`` from when its first sample will play."""
        if self._next_emotion is not None:
            self._emotions.append((self._now() + self.track.queued_s, self._next_emotion))
            self._next_emotion = None
        start_s = self._now() + self.track.queued_s
        if chunk.phonemes:
            clip = speech_clip(
                chunk.phonemes,
                start_s,
                fps=self.fps,
                duration_ms=chunk.duration_ms,
                notation=self.notation,
            )
            self.face.speak(clip)
        elif chunk.text and len(chunk.pcm):  # speech without timings: a loudness mouth
            self.face.speak(envelope_clip(chunk.pcm, chunk.sample_rate, start_s, fps=self.fps))
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

    def frame(self, now: float, lag_s: float = 0.0) -> bytes:
        """The encoded frame at ``now`` (advances the face and the sequence); the video, if
        any, gets the same weights (``lag_s``: how late the pump woke, for its ladder)."""
        while self._emotions and self._emotions[0][0] <= now:
            _, emotion = self._emotions.pop(0)
            try:
                self.face.set_emotion(emotion, EMOTION_INTENSITY)
            except UnknownEmotion:  # a tone the face has no pose for keeps the last one
                log.warning("avatar_emotion_unknown", emotion=emotion)
        weights = self.face.advance(now)
        if self.video is not None:
            self.video.tick(now, weights, lag_s)
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
                frame = self.frame(now, now - next_at)
                if self.video is None or self.video.sends_weights:
                    self.send(frame)
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
        if self.video is not None:
            await self.video.close()


def attach_room_avatar(
    agent: Any,
    send: Callable[[bytes], None],
    publish_video: Callable[[VideoFanout], object] | None = None,
    *,
    owner_id: str = "kefu-bot",
) -> AvatarStream | None:
    """Give a web room's :class:`~kefu.ai_bridge.agent.CallAgent` an avatar whose frames go to
    ``send`` (the room bot's ``publish_binary``) and start its pump; None when the agent's
    settings say ``avatar = "off"`` or it cannot take one. The agent's ``close`` stops it.

    With ``avatar = "video"``, a working renderer (``agent.services.avatar``) and
    ``publish_video``, the face is also rendered for the room members that ask for video:
    ``publish_video`` gets the :class:`~kefu.sfu.video.VideoFanout` to put in the room, and
    each quality step is published as :class:`~kefu.ai_bridge.events.AvatarQualityChanged`."""
    settings = getattr(agent, "settings", None)
    mode = getattr(settings, "avatar", "off")
    if mode not in ("weights", "video") or not hasattr(agent, "attach_avatar"):
        return None
    fps = float(getattr(settings, "avatar_fps", 30.0))
    stream = AvatarStream(agent.outbound, send, fps=fps)
    pool = getattr(getattr(agent, "services", None), "avatar", None)
    if mode == "video" and publish_video is not None and pool is not None and pool.ready:
        call_id, publish = agent.call_id, agent.publish

        def on_step(step: Step) -> None:
            publish(
                AvatarQualityChanged(
                    call_id, step.level.value, step.previous.value, step.reason, time.time()
                )
            )

        top = Quality.HD if getattr(settings, "avatar_size", "512") == "720p" else Quality.SD
        stream.video = AvatarVideo(pool, owner_id=owner_id, fps=fps, top=top, on_step=on_step)
        publish_video(stream.video.fanout)
    agent.attach_avatar(stream)
    stream.start()
    return stream

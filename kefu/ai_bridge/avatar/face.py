"""The per-call face driver: speech, expression and idle life in one weight vector per frame.

Sans-IO: the driver never reads a clock. The caller gives it the times (on the bot audio's
clock, seconds) and asks for the face with :meth:`FaceDriver.advance`; times must not go
backwards. Its mode follows a table::

    idle       ──caller_starts──────────────►  listening   attentive pose, gaze on the caller
    idle, listening ──speech_starts─────────►  speaking    lip-sync frames drive the mouth
    listening  ──caller_stops───────────────►  idle
    speaking   ──speech_ends────────────────►  idle
    speaking   ──speech_ends_over_caller────►  listening   the caller is still talking
    every mode ──hold───────────────────────►  listening   audio paused: mouth rests, clips wait
    every mode ──barge_in───────────────────►  listening   mouth to rest on the next frame
    speaking   ──caller_starts/stops────────►  speaking    barge-in (not the face) decides

Speech starts when the first queued :class:`~.lipsync.SpeechClip` reaches its start, and
ends ``speech_hangover_s`` after the last one ends (so the short silences between clauses do
not flicker the mode). ``hold``/``resume`` follow the barge-in table's HOLD and BACKCHANNEL
(:mod:`kefu.ai_bridge.barge`): while the bot's audio is paused the queued clips wait, and
on resume they are moved later by the time held, so the lips stay on the audio. Any other
pair raises :class:`kefu.errors.InvalidTransition`.

Layers, bottom to top: the speech clip's frame (zeros when none plays), the expression
(emotion plus listening pose, both eased with a first-order lag), the gaze (saccades and
drift, wandering less while listening), the blinks. See :mod:`.expression` for why a mood
never holds the lips open.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np

from kefu.ai_bridge.avatar.arkit import COUNT, Weights, pose_vector, rest
from kefu.ai_bridge.avatar.expression import LISTENING_POSE, approach, emotion_vector, layer
from kefu.ai_bridge.avatar.idle import BlinkConfig, Blinker, Gaze, GazeConfig, gaze_weights
from kefu.ai_bridge.avatar.lipsync import SpeechClip
from kefu.errors import InvalidTransition

__all__ = ["TRANSITIONS", "FaceConfig", "FaceDriver", "FaceInput", "FaceMode", "next_mode"]


class FaceMode(StrEnum):
    IDLE = "idle"
    """Nobody speaks: blinks, wandering gaze, the current mood."""
    LISTENING = "listening"
    """The caller speaks: attentive pose, gaze held near the caller."""
    SPEAKING = "speaking"
    """The bot speaks: the lip-sync frames drive the mouth."""


class FaceInput(StrEnum):
    CALLER_STARTS = "caller_starts"
    """The caller's voice began (the listener opened a turn)."""
    CALLER_STOPS = "caller_stops"
    """The caller's turn ended."""
    SPEECH_STARTS = "speech_starts"
    """A queued speech clip reached its start."""
    SPEECH_ENDS = "speech_ends"
    """The last clip ended, the caller silent."""
    SPEECH_ENDS_OVER_CALLER = "speech_ends_over_caller"
    """The last clip ended while the caller talks."""
    HOLD = "hold"
    """The caller spoke over the bot: its audio is paused, kept (maybe a backchannel)."""
    BARGE_IN = "barge_in"
    """The caller interrupted: the bot's audio was flushed."""


M, In = FaceMode, FaceInput

TRANSITIONS: dict[tuple[FaceMode, FaceInput], FaceMode] = {
    (M.IDLE, In.CALLER_STARTS): M.LISTENING,
    (M.IDLE, In.CALLER_STOPS): M.IDLE,
    (M.IDLE, In.SPEECH_STARTS): M.SPEAKING,
    (M.IDLE, In.BARGE_IN): M.LISTENING,
    (M.LISTENING, In.CALLER_STARTS): M.LISTENING,
    (M.LISTENING, In.CALLER_STOPS): M.IDLE,
    (M.LISTENING, In.SPEECH_STARTS): M.SPEAKING,
    (M.LISTENING, In.BARGE_IN): M.LISTENING,
    (M.SPEAKING, In.CALLER_STARTS): M.SPEAKING,
    (M.SPEAKING, In.CALLER_STOPS): M.SPEAKING,
    (M.SPEAKING, In.SPEECH_ENDS): M.IDLE,
    (M.SPEAKING, In.SPEECH_ENDS_OVER_CALLER): M.LISTENING,
    (M.SPEAKING, In.BARGE_IN): M.LISTENING,
    **{(mode, In.HOLD): M.LISTENING for mode in M},
}
"""(mode, input) -> next mode; a pair not listed is illegal."""


def next_mode(mode: FaceMode, event: FaceInput) -> FaceMode:
    try:
        return TRANSITIONS[(mode, event)]
    except KeyError:
        raise InvalidTransition("face", mode.value, event.value) from None


_GAZE_SPREAD = {M.IDLE: 1.0, M.LISTENING: 0.35, M.SPEAKING: 0.6}
"""How far fixations stray from the centre in each mode (listening: on the caller)."""


@dataclass(frozen=True, slots=True)
class FaceConfig:
    seed: int = 0
    """Seed of the blink and gaze schedules (one per call: faces do not blink in unison)."""
    blink: BlinkConfig = field(default_factory=BlinkConfig)
    gaze: GazeConfig = field(default_factory=GazeConfig)
    emotion_tau_s: float = 0.3
    """Time constant of a change of mood."""
    attention_tau_s: float = 0.25
    """Time constant of the listening pose coming and going (and of the gaze's range)."""
    speech_hangover_s: float = 0.2
    """The mode stays ``speaking`` this long after a clip ends, waiting for the next."""
    corner_share_speaking: float = 0.7
    """Share of the expression's mouth corners kept while the bot speaks."""


class FaceDriver:
    """One call's face. Feed it speech clips and caller events, read it once per frame."""

    def __init__(self, config: FaceConfig | None = None, *, start_s: float = 0.0) -> None:
        self.config = config or FaceConfig()
        blink_seed, gaze_seed = np.random.SeedSequence(self.config.seed).spawn(2)
        self._blinker = Blinker(np.random.default_rng(blink_seed), start_s, self.config.blink)
        self._gaze = Gaze(np.random.default_rng(gaze_seed), start_s, self.config.gaze)
        self.mode = FaceMode.IDLE
        self._clips: list[SpeechClip] = []
        self._speech_active = False
        self._caller_talking = False
        self._now = start_s
        self._emotion_target = rest()
        self._emotion = rest()
        self._attention = 0.0
        self._spread = 1.0
        self._listening = pose_vector(LISTENING_POSE)
        self._reset_pending = False
        self._barged_at: float | None = None
        self._held_at: float | None = None

    # -- inputs ------------------------------------------------------------------------------

    def _apply(self, event: FaceInput) -> None:
        self.mode = next_mode(self.mode, event)

    def speak(self, clip: SpeechClip) -> None:
        """Queue lip-sync frames; they show from ``clip.start_s`` on the audio clock. A clip
        that starts before the last barge-in belongs to flushed audio and is ignored."""
        if clip.frames.ndim != 2 or clip.frames.shape[1] != COUNT:
            raise ValueError(f"speech frames must be frames x {COUNT}")
        if len(clip.frames) and (self._barged_at is None or clip.start_s >= self._barged_at):
            self._clips.append(clip)
            self._clips.sort(key=lambda c: c.start_s)

    def caller_started(self) -> None:
        """The caller's voice began."""
        self._caller_talking = True
        self._apply(FaceInput.CALLER_STARTS)

    def caller_stopped(self) -> None:
        """The caller's turn ended."""
        self._caller_talking = False
        self._apply(FaceInput.CALLER_STOPS)

    def set_emotion(self, emotion: str, intensity: float = 1.0) -> None:
        """Ease towards ``emotion`` (one of the TTS's six) at ``intensity``."""
        self._emotion_target = emotion_vector(emotion, intensity)

    def barge_in(self, now_s: float) -> None:
        """The caller interrupted and the bot's audio was flushed at ``now_s``: every queued
        clip is dropped, and the next frame (any time from ``now_s``) has the mouth at rest."""
        self._now = max(self._now, now_s)
        self._barged_at = self._now
        self._held_at = None
        self._clips.clear()
        self._speech_active = False
        self._caller_talking = True
        self._reset_pending = True
        self._apply(FaceInput.BARGE_IN)

    def hold(self, now_s: float) -> None:
        """The bot's audio was paused at ``now_s`` (nothing dropped): the mouth rests from the
        next frame and the queued clips wait for :meth:`resume` or :meth:`barge_in`."""
        self._now = max(self._now, now_s)
        if self._held_at is None:
            self._held_at = self._now
        self._speech_active = False
        self._caller_talking = True
        self._apply(FaceInput.HOLD)

    def resume(self, now_s: float) -> None:
        """The paused audio plays again from ``now_s`` (a backchannel): every queued clip
        moves later by the time held, so its frames meet the audio they belong to."""
        if self._held_at is None:
            return
        self._now = max(self._now, now_s)
        delay = self._now - self._held_at
        self._held_at = None
        self._clips = [replace(c, start_s=c.start_s + delay) for c in self._clips]

    def take_reset(self) -> bool:
        """True once after a barge-in: the frame just produced must not be interpolated from
        the one before it (the wire format's reset flag)."""
        reset, self._reset_pending = self._reset_pending, False
        return reset

    # -- output ------------------------------------------------------------------------------

    @property
    def queued_until_s(self) -> float | None:
        """When the last queued clip ends (None when nothing is queued)."""
        return max((c.end_s for c in self._clips), default=None)

    def _speech_frame(self, now_s: float) -> Weights:
        if self._held_at is not None:
            return rest()  # the audio is paused: so is the mouth, at rest
        hangover = self.config.speech_hangover_s
        self._clips = [c for c in self._clips if c.end_s + hangover > now_s]
        frame = None
        active = False
        for clip in self._clips:
            if clip.start_s <= now_s:
                active = True
                k = clip.frame_index(now_s)
                if k is not None:
                    frame = clip.frames[k]
        if active and not self._speech_active:
            self._apply(FaceInput.SPEECH_STARTS)
        elif self._speech_active and not active:
            over_caller = self._caller_talking
            self._apply(In.SPEECH_ENDS_OVER_CALLER if over_caller else In.SPEECH_ENDS)
        self._speech_active = active
        if frame is None:
            return rest()
        mouth: Weights = np.clip(frame, 0.0, 1.0).astype(np.float32)
        return mouth

    def advance(self, now_s: float) -> Weights:
        """The face at ``now_s``: 52 weights in [0, 1]."""
        now_s = max(now_s, self._now)
        dt = now_s - self._now
        self._now = now_s
        speech = self._speech_frame(now_s)
        cfg = self.config
        self._emotion = approach(self._emotion, self._emotion_target, dt, cfg.emotion_tau_s)
        listening = self.mode is FaceMode.LISTENING
        keep = float(np.exp(-dt / cfg.attention_tau_s))
        self._attention = self._attention * keep + (1.0 if listening else 0.0) * (1.0 - keep)
        spread = _GAZE_SPREAD[self.mode]
        self._spread = self._spread * keep + spread * (1.0 - keep)
        expression = self._emotion + self._listening * np.float32(self._attention)
        speaking = self.mode is FaceMode.SPEAKING
        return layer(
            speech,
            expression,
            gaze_weights(*self._gaze.direction(now_s, self._spread)),
            self._blinker.closure(now_s),
            corner_share=cfg.corner_share_speaking if speaking else 1.0,
        )

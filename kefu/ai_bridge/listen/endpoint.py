"""End-of-turn detection (sans-IO): VAD probabilities in, turn events out.

Invariants of the state table below:

* A turn exists only in SPEECH and PAUSE; ``VoiceStarted`` opens it, ``TurnEnded`` closes it,
  and every opened turn is closed exactly once (by silence, by a semantic hint, or by the
  ``max_utterance_s`` cut). Turn ids increase by one per turn.
* PENDING is a speech candidate that has not lasted ``min_speech_ms``; it opens no turn, so a
  click or a cough emits nothing.
* ``VoicePaused`` is emitted at most once per pause, after ``speculate_after_ms`` of silence,
  carrying exactly the audio that ``TurnEnded`` will carry if the caller does not resume
  (same ``revision``): that is what lets the listener reuse a speculative decode as the final.
* Silence is counted from where the voice's energy fell, not from the VAD's last voiced chunk:
  Silero's probability decays 60-120 ms after a voice stops, and counting from there would
  make every configured wait that much longer. Only the timing moves; the audio handed on
  still runs to the VAD's end plus a tail, so a soft last syllable is never cut from the ASR.
* Time comes from the audio itself (each chunk ends ``leftover / 16 kHz`` before ``now``); the
  wall-clock timer (:meth:`get_timer`) only matters when audio stops arriving (DTX, hold).

Hysteresis: a chunk counts as voice at ``p >= start_threshold`` while no one is speaking, but
speech only stops at ``p < end_threshold``; with one threshold, syllables near it flicker.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from kefu.errors import ConfigError, InvalidTransition

from .turn_end import TurnCue
from .vad import CHUNK_SAMPLES, SAMPLE_RATE, SileroVad

__all__ = [
    "EndpointConfig",
    "EndpointEvent",
    "Endpointer",
    "TurnEnded",
    "VadModel",
    "VoicePaused",
    "VoiceResumed",
    "VoiceStarted",
]

_CHUNK_S = CHUNK_SAMPLES / SAMPLE_RATE
_TIMER_SLACK_S = 0.1
_BLOCK = 128  # 8 ms: resolution of the energy refinement (a VAD chunk is 4 blocks)
_MIN_FLOOR_RMS = 100.0  # about -50 dBFS: quieter is silence whatever the turn's level


def _rms(pcm: NDArray[np.int16]) -> float:
    x = pcm.astype(np.float64)
    return float(np.sqrt(np.mean(x * x))) if x.size else 0.0


class VadModel(Protocol):
    def probability(self, chunk: NDArray[np.int16]) -> float: ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Tuning of the endpointer; the defaults aim at the 250 ms end-of-turn budget."""

    start_threshold: float = 0.5
    """VAD probability at or above which a chunk is voice when nobody is speaking."""
    end_threshold: float = 0.35
    """VAD probability below which a chunk is silence while someone is speaking."""
    min_speech_ms: int = 120
    """Voice needed before a turn opens (shorter blips are ignored)."""
    end_silence_ms: int = 450
    """Silence that ends a turn."""
    semantic_end_silence_ms: int = 200
    """Silence that ends a turn once a semantic hook said the words so far are complete."""
    statement_end_silence_ms: int = 350
    """Silence that ends a turn once a semantic hook said the words read as a finished
    statement, though the voice did not clearly fall (:mod:`.turn_end`)."""
    open_end_silence_ms: int = 1500
    """Silence that ends a turn once a semantic hook said the caller is mid-sentence (a
    trailing "um", "about", a number being read out: :mod:`.turn_end`)."""
    speculate_after_ms: int = 96
    """Silence after which the audio so far is offered for speculative decoding."""
    resume_ms: int = 64
    """Voice needed to resume a paused turn (one noisy chunk must not cancel the pause)."""
    max_utterance_s: float = 20.0
    """A caller who never stops is cut here and answered."""
    pre_roll_ms: int = 300
    """Audio kept before the first voiced chunk (soft onsets fall below the threshold)."""
    short_speech_ms: int = 350
    """Turns with less voice than this are flagged ``short`` (backchannels: "uh-huh", "嗯")."""
    refine_end_ms: int = 160
    """How far the end of speech may move back from the VAD's last voiced chunk to where the
    voice's energy fell (0 trusts the VAD)."""
    refine_floor_db: float = 30.0
    """Level under the turn's loudest chunk, in dB, at which the voice counts as stopped."""

    def __post_init__(self) -> None:
        if not 0.0 < self.end_threshold <= self.start_threshold < 1.0:
            raise ConfigError(
                "need 0 < end_threshold <= start_threshold < 1", key="start_threshold"
            )
        for key in (
            "min_speech_ms",
            "end_silence_ms",
            "semantic_end_silence_ms",
            "statement_end_silence_ms",
            "resume_ms",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive", key=key)
        if self.open_end_silence_ms < self.end_silence_ms:
            raise ConfigError(
                "open_end_silence_ms must not be under end_silence_ms", key="open_end_silence_ms"
            )
        if not 0 <= self.speculate_after_ms <= self.end_silence_ms:
            raise ConfigError(
                "speculate_after_ms must lie in [0, end_silence_ms]", key="speculate_after_ms"
            )
        if self.max_utterance_s <= 1.0:
            raise ConfigError("max_utterance_s must exceed 1 s", key="max_utterance_s")
        if self.pre_roll_ms < 0:
            raise ConfigError("pre_roll_ms must not be negative", key="pre_roll_ms")
        if self.refine_end_ms < 0:
            raise ConfigError("refine_end_ms must not be negative", key="refine_end_ms")
        if self.refine_floor_db <= 0:
            raise ConfigError("refine_floor_db must be positive", key="refine_floor_db")


@dataclass(frozen=True, slots=True)
class VoiceStarted:
    turn_id: int
    """Turn opened by this voice."""
    at: float
    """Time the first voiced chunk began."""
    audio: NDArray[np.int16] = field(repr=False, compare=False)
    """Pre-roll + the voice that opened the turn (for partial recognizers)."""


@dataclass(frozen=True, slots=True)
class VoicePaused:
    turn_id: int
    at: float
    """Time the voice stopped (the silence began)."""
    revision: int
    """Sample index of the end of speech; equal revisions mean identical audio."""
    audio: NDArray[np.int16] = field(repr=False, compare=False)
    """Pre-roll + speech + a short tail, for a speculative decode."""


@dataclass(frozen=True, slots=True)
class VoiceResumed:
    turn_id: int
    at: float
    """Time the voice came back: any speculative decode is stale."""


@dataclass(frozen=True, slots=True)
class TurnEnded:
    turn_id: int
    at: float
    """Time the end of turn was decided."""
    speech_end_at: float
    """Time the voice stopped (where its energy fell, within the last voiced VAD chunk or
    ``refine_end_ms`` before it)."""
    short: bool
    """Less than ``short_speech_ms`` of voice: likely a backchannel, not a barge-in."""
    reason: str
    """``silence``, ``semantic`` (a complete cue shortened the wait), ``hesitation`` (an open
    cue lengthened it, and the caller still did not go on) or ``max_length``."""
    revision: int
    """Sample index of the end of speech (compare with :class:`VoicePaused`)."""
    audio: NDArray[np.int16] = field(repr=False, compare=False)
    """Pre-roll + speech + a short tail."""


EndpointEvent = VoiceStarted | VoicePaused | VoiceResumed | TurnEnded


class _State(Enum):
    IDLE = "idle"
    PENDING = "pending"
    SPEECH = "speech"
    PAUSE = "pause"


# (state, input) -> next state. Inputs: "voice", "silence", "opened" (min speech reached),
# "resumed", "end" (silence/semantic/max cut), "drop" (candidate too short).
_TABLE: dict[tuple[_State, str], _State] = {
    (_State.IDLE, "silence"): _State.IDLE,
    (_State.IDLE, "voice"): _State.PENDING,
    (_State.PENDING, "voice"): _State.PENDING,
    (_State.PENDING, "opened"): _State.SPEECH,
    (_State.PENDING, "drop"): _State.IDLE,
    (_State.SPEECH, "voice"): _State.SPEECH,
    (_State.SPEECH, "silence"): _State.PAUSE,
    (_State.SPEECH, "end"): _State.IDLE,
    (_State.PAUSE, "silence"): _State.PAUSE,
    (_State.PAUSE, "voice"): _State.PAUSE,
    (_State.PAUSE, "resumed"): _State.SPEECH,
    (_State.PAUSE, "end"): _State.IDLE,
}


class Endpointer:
    """Per-call end-of-turn detector; feed 16 kHz mono int16 of any chunk size."""

    def __init__(self, config: EndpointConfig | None = None, vad: VadModel | None = None) -> None:
        self.config = config or EndpointConfig()
        self._vad: VadModel = vad if vad is not None else SileroVad()
        self._state = _State.IDLE
        self._buf = np.zeros(0, np.int16)
        self._samples_seen = 0  # total samples processed through the VAD
        self._pre_roll: deque[NDArray[np.int16]] = deque(
            maxlen=max(1, round(self.config.pre_roll_ms / 1000 / _CHUNK_S))
        )
        self._chunks: list[NDArray[np.int16]] = []  # current utterance incl. pre-roll
        self._turn_id = 0
        self._voiced_run = 0  # consecutive voiced chunks (PENDING / resume in PAUSE)
        self._voiced_total = 0  # voiced chunks in the current turn
        self._speech_start_at = 0.0
        self._speech_start_sample = 0  # _samples_seen at the end of the first voiced chunk
        self._speech_end_at = 0.0
        self._speech_end_chunk = 0  # chunk count (in _chunks) at the end of speech
        self._voice_start_chunk = 0  # index (in _chunks) of the first voiced chunk
        self._peak_rms = 0.0  # loudest voiced chunk of the turn
        self._paused_sent = False
        self._paused_tail = 0  # tail chunks in the VoicePaused audio (TurnEnded reuses it)
        self._cue = TurnCue.UNSURE
        self.last_probability = 0.0

    @property
    def state(self) -> str:
        return self._state.value

    @property
    def in_turn(self) -> bool:
        return self._state in (_State.SPEECH, _State.PAUSE)

    @property
    def speech_audio_s(self) -> float:
        """Seconds of audio since the open turn's speech began, by the audio's own clock: a
        busy event loop that hands over frames late does not make the voice longer."""
        if not self.in_turn:
            return 0.0
        return (self._samples_seen - self._speech_start_sample) / SAMPLE_RATE

    @property
    def turn_id(self) -> int:
        """Id of the open turn, or of the last one when none is open."""
        return self._turn_id

    def _go(self, event: str) -> None:
        nxt = _TABLE.get((self._state, event))
        if nxt is None:
            raise InvalidTransition("endpointer", self._state.value, event)
        self._state = nxt

    def hint(self, turn_id: int, cue: TurnCue) -> None:
        """Semantic hook: what the words (and voice) of ``turn_id`` so far say.

        ``COMPLETE`` ends the turn after ``semantic_end_silence_ms``, ``STATEMENT`` after
        ``statement_end_silence_ms``, ``OPEN`` after ``open_end_silence_ms``, ``UNSURE`` after
        ``end_silence_ms``. The cue is dropped as
        soon as the caller resumes speaking.
        """
        if self.in_turn and turn_id == self._turn_id:
            self._cue = cue

    def feed(self, pcm16k: NDArray[np.int16], now: float) -> list[EndpointEvent]:
        """Consume audio whose last sample arrived at ``now``; returns the events it caused."""
        pcm = np.asarray(pcm16k, dtype=np.int16).reshape(-1)
        self._buf = np.concatenate((self._buf, pcm)) if self._buf.size else pcm.copy()
        events: list[EndpointEvent] = []
        whole = len(self._buf) // CHUNK_SAMPLES
        for i in range(whole):
            chunk = self._buf[i * CHUNK_SAMPLES : (i + 1) * CHUNK_SAMPLES]
            leftover = len(self._buf) - (i + 1) * CHUNK_SAMPLES
            self._step(chunk, now - leftover / SAMPLE_RATE, events)
        self._buf = self._buf[whole * CHUNK_SAMPLES :].copy()
        return events

    def get_timer(self) -> float | None:
        """Wall-clock deadline that ends a paused turn if audio stops arriving.

        A little later than the audio-timed end so that, with audio flowing, the audio decides.
        """
        if self._state is not _State.PAUSE:
            return None
        return self._speech_end_at + self._end_silence_s() + _TIMER_SLACK_S

    def handle_timer(self, now: float) -> list[EndpointEvent]:
        deadline = self.get_timer()
        if deadline is None or now < deadline:
            return []
        events: list[EndpointEvent] = []
        self._end_turn(now, self._silence_reason(), events)
        return events

    def reset(self) -> None:
        """Drop any open turn silently (call hung up, agent took over)."""
        self._state = _State.IDLE
        self._chunks.clear()
        self._pre_roll.clear()
        self._buf = np.zeros(0, np.int16)
        self._vad.reset()

    # -- internals -------------------------------------------------------------------------

    def _end_silence_s(self) -> float:
        cfg = self.config
        if self._cue is TurnCue.COMPLETE:
            return cfg.semantic_end_silence_ms / 1000
        if self._cue is TurnCue.STATEMENT:
            return cfg.statement_end_silence_ms / 1000
        if self._cue is TurnCue.OPEN:
            return cfg.open_end_silence_ms / 1000
        return cfg.end_silence_ms / 1000

    def _silence_reason(self) -> str:
        if self._cue in (TurnCue.COMPLETE, TurnCue.STATEMENT):
            return "semantic"
        return "hesitation" if self._cue is TurnCue.OPEN else "silence"

    def _step(self, chunk: NDArray[np.int16], t_end: float, events: list[EndpointEvent]) -> None:
        cfg = self.config
        p = self._vad.probability(chunk)
        self.last_probability = p
        self._samples_seen += CHUNK_SAMPLES
        state = self._state
        if state is _State.IDLE:
            if p >= cfg.start_threshold:
                self._go("voice")
                self._chunks = [*self._pre_roll, chunk.copy()]
                self._voice_start_chunk = len(self._pre_roll)
                self._pre_roll.clear()
                self._voiced_run = 1
                self._speech_start_at = t_end - _CHUNK_S
                self._speech_start_sample = self._samples_seen - CHUNK_SAMPLES
                self._maybe_open(t_end, events)
            else:
                self._go("silence")
                self._pre_roll.append(chunk.copy())
            return
        self._chunks.append(chunk.copy())
        if state is _State.PENDING:
            if p >= cfg.end_threshold:
                self._go("voice")
                self._voiced_run += 1
                self._maybe_open(t_end, events)
            else:
                self._go("drop")
                self._pre_roll.extend(self._chunks)
                self._chunks = []
            return
        if state is _State.SPEECH:
            if p >= cfg.end_threshold:
                self._go("voice")
                self._voiced_total += 1
                self._mark_speech_end(t_end)
            else:
                self._go("silence")
                self._voiced_run = 0
                self._paused_sent = False
                self._refine_speech_end()
            if t_end - self._speech_start_at >= cfg.max_utterance_s:
                self._end_turn(t_end, "max_length", events)
            elif self._state is _State.PAUSE:
                self._check_pause(t_end, events)
            return
        # PAUSE
        if p >= cfg.start_threshold:
            self._go("voice")
            self._voiced_run += 1
            if self._voiced_run * _CHUNK_S * 1000 >= cfg.resume_ms:
                self._go("resumed")
                self._cue = TurnCue.UNSURE
                self._voiced_total += self._voiced_run
                self._mark_speech_end(t_end)
                events.append(VoiceResumed(self._turn_id, t_end - self._voiced_run * _CHUNK_S))
                self._voiced_run = 0
                return
        else:
            self._go("silence")
            self._voiced_run = 0
        if t_end - self._speech_start_at >= cfg.max_utterance_s:
            self._end_turn(t_end, "max_length", events)
        else:
            self._check_pause(t_end, events)

    def _mark_speech_end(self, t_end: float) -> None:
        self._speech_end_at = t_end
        self._speech_end_chunk = len(self._chunks)
        self._peak_rms = max(self._peak_rms, _rms(self._chunks[-1]))

    def _refine_speech_end(self) -> None:
        """Move the speech end back to the last loud 8 ms block of the VAD's voiced tail."""
        cfg = self.config
        if cfg.refine_end_ms <= 0:
            return
        # A noise bed over the floor keeps every block loud, so a noisy line keeps the VAD's end.
        floor = max(_MIN_FLOOR_RMS, self._peak_rms * 10 ** (-cfg.refine_floor_db / 20))
        window = int(np.ceil(cfg.refine_end_ms / 1000 / _CHUNK_S))
        lo = max(self._voice_start_chunk, self._speech_end_chunk - window)
        if lo >= self._speech_end_chunk:
            return
        tail = np.concatenate(self._chunks[lo : self._speech_end_chunk]).astype(np.float64)
        levels = np.sqrt(np.mean(tail.reshape(-1, _BLOCK) ** 2, axis=1))
        loud = np.flatnonzero(levels >= floor)
        if not loud.size:
            return  # nothing clearly voiced in the window: keep the VAD's end
        quiet_s = (len(levels) - 1 - int(loud[-1])) * _BLOCK / SAMPLE_RATE
        self._speech_end_at -= min(quiet_s, cfg.refine_end_ms / 1000)

    def _maybe_open(self, t_end: float, events: list[EndpointEvent]) -> None:
        if self._voiced_run * _CHUNK_S * 1000 + 1e-6 < self.config.min_speech_ms:
            return
        self._go("opened")
        self._turn_id += 1
        self._voiced_total = self._voiced_run
        self._cue = TurnCue.UNSURE
        self._peak_rms = max(_rms(c) for c in self._chunks[self._voice_start_chunk :])
        self._mark_speech_end(t_end)
        events.append(
            VoiceStarted(self._turn_id, self._speech_start_at, np.concatenate(self._chunks))
        )

    def _tail_chunks(self) -> int:
        return max(1, round(self.config.speculate_after_ms / 1000 / _CHUNK_S))

    def _utterance(self) -> tuple[NDArray[np.int16], int]:
        available = len(self._chunks) - self._speech_end_chunk
        tail = self._paused_tail if self._paused_sent else min(self._tail_chunks(), available)
        end = min(len(self._chunks), self._speech_end_chunk + tail)
        audio = np.concatenate(self._chunks[:end]) if end else np.zeros(0, np.int16)
        revision = self._samples_seen - (len(self._chunks) - self._speech_end_chunk) * CHUNK_SAMPLES
        return audio, revision

    def _check_pause(self, t_end: float, events: list[EndpointEvent]) -> None:
        silence_s = t_end - self._speech_end_at
        if not self._paused_sent and silence_s + 1e-6 >= self.config.speculate_after_ms / 1000:
            self._paused_tail = min(self._tail_chunks(), len(self._chunks) - self._speech_end_chunk)
            self._paused_sent = True
            audio, revision = self._utterance()
            events.append(VoicePaused(self._turn_id, self._speech_end_at, revision, audio))
        if silence_s + 1e-6 >= self._end_silence_s():
            self._end_turn(t_end, self._silence_reason(), events)

    def _end_turn(self, at: float, reason: str, events: list[EndpointEvent]) -> None:
        audio, revision = self._utterance()
        if reason == "max_length":
            audio = np.concatenate(self._chunks)
            revision = self._samples_seen
            self._speech_end_at = at
        short = self._voiced_total * _CHUNK_S * 1000 < self.config.short_speech_ms
        self._go("end")
        events.append(
            TurnEnded(self._turn_id, at, self._speech_end_at, short, reason, revision, audio)
        )
        self._chunks = []
        self._pre_roll.clear()
        self._cue = TurnCue.UNSURE

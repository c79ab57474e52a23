"""Endpointer on synthetic sequences with hand-driven time (no sleeping)."""

from __future__ import annotations

import numpy as np
import pytest

from kefu.ai_bridge.listen.endpoint import (
    EndpointConfig,
    Endpointer,
    TurnEnded,
    VoicePaused,
    VoiceResumed,
    VoiceStarted,
)
from kefu.ai_bridge.listen.turn_end import TurnCue
from kefu.errors import ConfigError


class LevelVad:
    """Fake VAD: a chunk is voice (0.9) when its mean absolute level exceeds ``level``."""

    def __init__(self, level: float = 100) -> None:
        self.calls = 0
        self.level = level

    def probability(self, chunk: np.ndarray) -> float:
        self.calls += 1
        return 0.9 if float(np.abs(chunk.astype(np.int32)).mean()) > self.level else 0.02

    def reset(self) -> None:
        pass


def tone(seconds: float, level: int = 3000) -> np.ndarray:
    """A 220 Hz tone standing for speech with :class:`LevelVad`."""
    t = np.arange(int(seconds * 16000)) / 16000
    return (level * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16000), np.int16)


class Feeder:
    """Feeds 20 ms frames with ``now`` = audio time, like a paced RTP stream."""

    def __init__(self, ep: Endpointer, t0: float = 100.0) -> None:
        self.ep = ep
        self.now = t0
        self.events: list[object] = []

    def feed(self, pcm: np.ndarray) -> list[object]:
        out: list[object] = []
        for i in range(0, len(pcm), 320):
            frame = pcm[i : i + 320]
            self.now += len(frame) / 16000
            out += self.ep.feed(frame, self.now)
        self.events += out
        return out


def kinds(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


def make(**kw) -> tuple[Endpointer, Feeder]:
    ep = Endpointer(EndpointConfig(**kw), vad=LevelVad())
    return ep, Feeder(ep)


def test_speech_pause_speech_long_silence_is_one_turn() -> None:
    ep, f = make()
    f.feed(silence(0.5))
    f.feed(tone(1.0))
    f.feed(silence(0.25))  # a natural pause, shorter than end_silence
    f.feed(tone(0.8))
    ev = f.feed(silence(1.0))
    assert kinds(f.events) == [
        "VoiceStarted",
        "VoicePaused",
        "VoiceResumed",
        "VoicePaused",
        "TurnEnded",
    ]
    end = ev[-1]
    assert isinstance(end, TurnEnded)
    assert end.reason == "silence" and not end.short and end.turn_id == 1
    # The end is decided end_silence after the voice stops (within one 32 ms VAD chunk).
    assert 0.45 <= end.at - end.speech_end_at < 0.45 + 0.033
    # Audio: pre-roll + 1.0 + 0.25 + 0.8 s + speculation tail.
    assert 2.3 < len(end.audio) / 16000 < 2.5
    assert ep.state == "idle"


def test_speculative_audio_matches_final_when_caller_does_not_resume() -> None:
    _, f = make()
    f.feed(tone(1.0))
    f.feed(silence(1.0))
    paused = [e for e in f.events if isinstance(e, VoicePaused)]
    end = [e for e in f.events if isinstance(e, TurnEnded)]
    assert len(paused) == 1 and len(end) == 1
    assert paused[0].revision == end[0].revision
    assert np.array_equal(paused[0].audio, end[0].audio)


def test_resume_changes_revision() -> None:
    _, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.2))
    f.feed(tone(0.5))
    f.feed(silence(1.0))
    paused = [e for e in f.events if isinstance(e, VoicePaused)]
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert paused[0].revision != end.revision == paused[1].revision
    resumed = [e for e in f.events if isinstance(e, VoiceResumed)][0]
    assert resumed.turn_id == 1


def test_caller_who_never_stops_is_cut_at_max_utterance() -> None:
    _, f = make(max_utterance_s=5.0)
    f.feed(tone(12.0))
    ends = [e for e in f.events if isinstance(e, TurnEnded)]
    starts = [e for e in f.events if isinstance(e, VoiceStarted)]
    assert [e.reason for e in ends] == ["max_length", "max_length"]
    assert [e.turn_id for e in starts] == [1, 2, 3]  # the third turn is still open
    assert all(4.9 < len(e.audio) / 16000 < 5.5 for e in ends)


def test_short_backchannel_flagged() -> None:
    _, f = make()
    f.feed(silence(0.3))
    f.feed(tone(0.25))  # "uh-huh"
    f.feed(silence(1.0))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert end.short


def test_blip_shorter_than_min_speech_opens_no_turn() -> None:
    _, f = make()
    f.feed(silence(0.3))
    f.feed(tone(0.05))
    f.feed(silence(1.0))
    assert f.events == []


def test_pre_roll_is_kept() -> None:
    _, f = make(pre_roll_ms=300)
    f.feed(silence(1.0))
    f.feed(tone(0.5))
    f.feed(silence(1.0))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    lead = end.audio[: int(0.28 * 16000)]
    assert np.abs(lead).max() == 0  # ~300 ms of the silence before the voice
    assert 0.85 < len(end.audio) / 16000 < 0.95


def test_semantic_hint_shortens_end_silence() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    ep.hint(ep.turn_id, TurnCue.COMPLETE)
    f.feed(silence(0.5))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert end.reason == "semantic"
    assert end.at - end.speech_end_at < 0.2 + 0.033


def test_hint_is_dropped_when_caller_resumes() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    ep.hint(ep.turn_id, TurnCue.COMPLETE)
    f.feed(tone(0.5))
    f.feed(silence(1.0))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert end.reason == "silence"


def test_statement_hint_ends_after_the_statement_wait() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    ep.hint(ep.turn_id, TurnCue.STATEMENT)
    f.feed(silence(0.6))
    (end,) = [e for e in f.events if isinstance(e, TurnEnded)]
    assert end.reason == "semantic"
    assert 0.35 - 0.04 < end.at - end.speech_end_at < 0.35 + 0.04


def test_open_hint_waits_through_a_hesitation_then_ends_as_hesitation() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    ep.hint(ep.turn_id, TurnCue.OPEN)
    f.feed(silence(1.2))  # over twice the plain 450 ms: the turn is still open
    assert not [e for e in f.events if isinstance(e, TurnEnded)]
    f.feed(tone(0.6))  # the caller goes on; the cue is dropped with the pause
    f.feed(silence(0.6))
    (end,) = [e for e in f.events if isinstance(e, TurnEnded)]
    assert end.reason == "silence" and end.at - end.speech_end_at < 0.45 + 0.04


def test_open_hint_ends_the_turn_after_the_long_wait() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    ep.hint(ep.turn_id, TurnCue.OPEN)
    f.feed(silence(2.0))
    (end,) = [e for e in f.events if isinstance(e, TurnEnded)]
    assert end.reason == "hesitation"
    assert 1.5 - 0.04 < end.at - end.speech_end_at < 1.5 + 0.04


def test_timer_ends_turn_when_audio_stops_arriving() -> None:
    ep, f = make()
    f.feed(tone(1.0))
    f.feed(silence(0.1))
    deadline = ep.get_timer()
    assert deadline is not None
    assert ep.handle_timer(deadline - 0.01) == []
    ev = ep.handle_timer(deadline)
    assert kinds(ev) == ["TurnEnded"] and ep.get_timer() is None


def test_any_chunk_size_gives_same_events() -> None:
    pcm = np.concatenate([silence(0.3), tone(1.0), silence(1.0)])
    results = []
    for size in (160, 320, 511, 4000):
        ep = Endpointer(vad=LevelVad())
        evs = []
        now = 0.0
        for i in range(0, len(pcm), size):
            frame = pcm[i : i + size]
            now += len(frame) / 16000
            evs += ep.feed(frame, now)
        results.append([(type(e).__name__, round(e.at, 3)) for e in evs])
    assert all(r == results[0] for r in results)


def test_bad_config_rejected() -> None:
    with pytest.raises(ConfigError):
        EndpointConfig(start_threshold=0.3, end_threshold=0.5)
    with pytest.raises(ConfigError) as exc:
        EndpointConfig(end_silence_ms=0)
    assert exc.value.key == "end_silence_ms"


@pytest.mark.parametrize("kind", ["white", "clipped"])
def test_noise_and_clipping_do_not_make_endless_speech(kind: str) -> None:
    """Real Silero on 25 s of loud noise: no turn may outlive max_utterance_s."""
    rng = np.random.default_rng(7)
    noise = rng.normal(0, 8000, 25 * 16000)
    if kind == "clipped":
        noise = noise * 20  # hard clipping: a square-ish full-scale signal
    pcm = np.clip(noise, -32768, 32767).astype(np.int16)
    ep = Endpointer(EndpointConfig(max_utterance_s=20.0))
    f = Feeder(ep)
    f.feed(pcm)
    f.feed(silence(1.0))
    assert not ep.in_turn
    for e in f.events:
        if isinstance(e, TurnEnded):
            assert len(e.audio) / 16000 <= 21


def test_speech_duration_follows_the_audio_not_the_wall_clock() -> None:
    ep = Endpointer(EndpointConfig(), vad=LevelVad())
    assert ep.speech_audio_s == 0.0
    ep.feed(silence(0.2), now=10.0)
    # 0.256 s of voice (8 VAD chunks) handed over in one late batch, stamped 5 s later:
    # a backlog on the event loop must not make the caller's voice last longer.
    ep.feed(tone(0.256), now=15.0)
    assert ep.in_turn
    assert ep.speech_audio_s == pytest.approx(0.256, abs=0.033)
    ep.feed(silence(2.0), now=17.0)
    assert not ep.in_turn and ep.speech_audio_s == 0.0


class LaggingVad(LevelVad):
    """Like Silero: the probability stays high for ``hangover`` chunks after the voice stops."""

    def __init__(self, hangover: int = 3, level: float = 100) -> None:
        super().__init__(level)
        self.hangover = hangover
        self._left = 0

    def probability(self, chunk: np.ndarray) -> float:
        if super().probability(chunk) > 0.5:
            self._left = self.hangover
            return 0.9
        if self._left:
            self._left -= 1
            return 0.8
        return 0.02


def lagging(level: float = 100, **kw) -> tuple[Endpointer, Feeder]:
    ep = Endpointer(EndpointConfig(**kw), vad=LaggingVad(level=level))
    return ep, Feeder(ep)


def test_silence_is_counted_from_where_the_voice_stopped_not_from_the_vad() -> None:
    ep, f = lagging()
    f.feed(silence(0.3))
    f.feed(tone(1.0))
    voice_end = f.now
    f.feed(silence(1.0))
    paused = [e for e in f.events if isinstance(e, VoicePaused)]
    end = [e for e in f.events if isinstance(e, TurnEnded)]
    assert len(paused) == 1 and len(end) == 1
    # The VAD said "voice" ~96 ms past the tone; the end is placed within one 8 ms block of it.
    assert abs(end[0].speech_end_at - voice_end) <= 0.008 + 1e-6
    assert 0.45 <= end[0].at - voice_end < 0.45 + 0.033 + 0.008
    # Speculation starts as soon as the VAD lets go (~100 ms of real silence), and its audio
    # is still exactly the final's: through the VAD's voiced tail, so nothing is cut.
    assert paused[0].at == end[0].speech_end_at
    assert np.array_equal(paused[0].audio, end[0].audio)
    assert paused[0].revision == end[0].revision
    assert len(end[0].audio) / 16000 >= 0.3 + 1.0 + 0.09


def test_without_refinement_the_vad_end_stands() -> None:
    _, f = lagging(refine_end_ms=0)
    f.feed(silence(0.3))
    f.feed(tone(1.0))
    voice_end = f.now
    f.feed(silence(1.0))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert 0.09 <= end.speech_end_at - voice_end <= 0.13


def test_on_a_noisy_line_the_vad_end_stands() -> None:
    """A noise bed keeps the energy up after the voice: energy cannot tell, so trust the VAD."""
    rng = np.random.default_rng(3)
    bed = lambda s: rng.normal(0, 900, int(s * 16000)).astype(np.int16)  # noqa: E731
    _, f = lagging(level=1500)  # the bed alone averages ~720
    f.feed(bed(0.4))
    f.feed(tone(1.0) + bed(1.0))
    voice_end = f.now
    f.feed(bed(1.5))
    end = [e for e in f.events if isinstance(e, TurnEnded)][0]
    assert end.speech_end_at - voice_end >= 0.09

"""Phoneme marks to frames: timing, coarticulation, lip closure, ranges."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import INDEX
from kefu.ai_bridge.avatar.lipsync import (
    LipsyncConfig,
    SpeechClip,
    VisemeSpan,
    concat_chunks,
    frame_count,
    frame_times,
    lipsync,
    speech_clip,
    viseme_spans,
)
from kefu.ai_bridge.avatar.poses import SHAPES
from kefu.ai_bridge.avatar.visemes import Notation, Viseme
from kefu.ai_bridge.speak.base import PhonemeMark, TtsChunk

JAW = INDEX["jawOpen"]
CLOSE = INDEX["mouthClose"]
PRESS = [INDEX["mouthPressLeft"], INDEX["mouthPressRight"]]
PUCKER = INDEX["mouthPucker"]
FUNNEL = INDEX["mouthFunnel"]
PP_JAW = SHAPES[Viseme.PP].pose["jawOpen"]
PP_PRESS = SHAPES[Viseme.PP].pose["mouthPressLeft"]
AA_JAW = SHAPES[Viseme.AA].pose["jawOpen"]

MarksBuilder = Callable[[Sequence[tuple[str, float]]], tuple[PhonemeMark, ...]]


def frames_inside(start_ms: float, end_ms: float, fps: float) -> list[int]:
    first = math.ceil(start_ms * fps / 1000 - 1e-9)
    return [k for k in range(first, first + 100) if k * 1000 / fps < end_ms]


def assert_closed(row: np.ndarray) -> None:
    assert row[JAW] <= PP_JAW + 1e-6
    assert row[CLOSE] >= row[JAW] - 1e-6  # lips sealed whatever the jaw does
    assert row[PRESS].min() >= PP_PRESS - 1e-6
    for name in ("mouthFunnel", "mouthLowerDownLeft", "mouthUpperUpRight", "tongueOut"):
        assert row[INDEX[name]] <= SHAPES[Viseme.PP].pose.get(name, 0.0) + 1e-6


# --- timeline ---------------------------------------------------------------------------------


def test_frames_sit_on_the_audio_timeline(marks: MarksBuilder) -> None:
    assert frame_count(1.0, 30) == 30 and frame_count(1.0, 60) == 60
    assert frame_count(1.001, 30) == 31 and frame_count(0.0, 30) == 0
    assert frame_times(4, 30).tolist() == pytest.approx([0.0, 1 / 30, 2 / 30, 0.1])
    utterance = marks([("sil", 100), ("a", 300), ("sil", 100)])
    assert lipsync(utterance).shape == (15, 52)  # 500 ms from the marks alone
    assert lipsync(utterance, duration_ms=1000).shape == (30, 52)  # the audio's length
    assert lipsync(utterance, fps=60, duration_ms=1000).shape == (60, 52)
    assert lipsync(()).shape == (0, 52)
    assert lipsync((), duration_ms=200).tolist() == np.zeros((6, 52)).tolist()


def test_sixty_fps_samples_the_same_curves_twice_as_often(marks: MarksBuilder) -> None:
    utterance = marks([("sil", 90), ("b", 70), ("ˈa", 160), ("ɪ", 80), ("m", 60), ("sil", 150)])
    at30 = lipsync(utterance, fps=30)
    at60 = lipsync(utterance, fps=60)
    np.testing.assert_allclose(at60[::2][: len(at30)], at30, atol=1e-6)
    assert at30.dtype == np.float32 and at60.dtype == np.float32


def test_spans_split_compound_phonemes_with_the_vowel_taking_more(marks: MarksBuilder) -> None:
    spans = viseme_spans(marks([("h", 100), ("ao3", 320)]), Notation.PINYIN)
    assert [s.viseme for s in spans] == [Viseme.KK, Viseme.AA, Viseme.U]
    assert spans[1].start_s == pytest.approx(0.1) and spans[1].end_s == pytest.approx(0.26)
    assert spans[2].end_s == pytest.approx(0.42)
    spans = viseme_spans(marks([("ang", 160)]), Notation.PINYIN)
    assert spans[0].end_s - spans[0].start_s == pytest.approx(0.1)  # vowel 1 : coda 0.6
    # a tone sent as its own mark lengthens the syllable before it
    spans = viseme_spans(marks([("a", 100), ("˧˥", 50), ("sil", 50)]))
    assert [(s.viseme, s.end_s) for s in spans] == [
        (Viseme.AA, pytest.approx(0.15)),
        (Viseme.SIL, pytest.approx(0.2)),
    ]


def test_marks_with_broken_times_are_skipped_not_fatal() -> None:
    broken = (
        PhonemeMark("a", float("nan"), 100),
        PhonemeMark("m", 0, float("inf")),
        PhonemeMark("a", 0, -50),
        PhonemeMark("o", 0, 200),
    )
    spans = viseme_spans(broken)
    assert [(s.viseme, s.start_s, s.end_s) for s in spans] == [
        (Viseme.AA, 0.0, 0.0),
        (Viseme.O, 0.0, pytest.approx(0.2)),
    ]
    assert np.isfinite(lipsync(broken)).all()


# --- the mouth --------------------------------------------------------------------------------


def test_bilabials_close_the_mouth_between_open_vowels(marks: MarksBuilder) -> None:
    # "papa" with the vowels wide open around each closure
    utterance = marks([("sil", 100), ("p", 90), ("ˈɑː", 200), ("p", 80), ("ɑ", 200), ("sil", 100)])
    frames = lipsync(utterance, fps=30)
    for start, end in ((100, 190), (390, 470)):
        inside = frames_inside(start, end, 30)
        assert len(inside) >= 2
        for k in inside:
            assert_closed(frames[k])
    for center_ms in (290, 570):  # the middle of each vowel: jaw wide open, lips apart
        row = frames[round(center_ms * 30 / 1000)]
        assert row[JAW] >= 0.5 and row[CLOSE] <= 0.05 and row[PRESS].max() <= 0.05


def test_a_bilabial_shorter_than_a_frame_still_gets_one_closed_frame(
    marks: MarksBuilder,
) -> None:
    utterance = marks([("sil", 50), ("ɑ", 120), ("b", 12), ("ɑ", 150), ("sil", 50)])
    assert frames_inside(170, 182, 30) == []  # no frame time falls inside the /b/
    frames = lipsync(utterance, fps=30)
    nearest = round(0.176 * 30)
    assert_closed(frames[nearest])
    assert frames[nearest - 2][JAW] >= 0.3 and frames[nearest + 2][JAW] >= 0.3


def test_m_in_mandarin_and_english_closes_too(marks: MarksBuilder) -> None:
    pinyin = marks([("sil", 60), ("m", 80), ("a1", 200), ("m", 80), ("a5", 150), ("sil", 60)])
    frames = lipsync(pinyin, notation=Notation.PINYIN, fps=60)
    for start, end in ((60, 140), (340, 420)):
        for k in frames_inside(start, end, 60):
            assert_closed(frames[k])


def test_open_vowels_open_the_jaw_and_close_vowels_do_not(marks: MarksBuilder) -> None:
    def jaw_at_center(vowel: str) -> float:
        frames = lipsync(marks([("sil", 200), (vowel, 300), ("sil", 200)]), fps=30)
        return float(frames[round(0.35 * 30)][JAW])

    assert jaw_at_center("ɑː") == pytest.approx(AA_JAW, abs=0.01)
    assert jaw_at_center("ɛ") == pytest.approx(SHAPES[Viseme.E].pose["jawOpen"], abs=0.01)
    assert jaw_at_center("iː") == pytest.approx(SHAPES[Viseme.I].pose["jawOpen"], abs=0.01)
    assert jaw_at_center("ɑː") > jaw_at_center("ɛ") > jaw_at_center("iː")


def test_visemes_ramp_in_before_their_sound_and_out_after(marks: MarksBuilder) -> None:
    frames = lipsync(marks([("sil", 300), ("ɑː", 300), ("sil", 400)]), fps=30)
    jaw = frames[:, JAW]
    assert jaw[:8].max() == 0.0  # 0..233 ms: before the 60 ms lead
    assert 0.0 < jaw[8] < jaw[9] < jaw[10] < jaw[11]  # 267 ms on: opening ahead of the sound
    # at 300 ms the vowel (dominance 1.2) and the ending pause (1.0) share the mouth
    assert jaw[9] == pytest.approx(AA_JAW * 1.2 / 2.2, abs=1e-4)
    assert jaw[11:17].min() >= 0.99 * AA_JAW  # 367..533 ms: the vowel alone
    assert AA_JAW > jaw[17] > jaw[18] > jaw[19] > jaw[20] > 0.0  # closing towards the pause
    assert jaw[21:].max() == 0.0  # back to rest


def test_lips_round_ahead_of_a_rounded_vowel(marks: MarksBuilder) -> None:
    def pucker_during_s(vowel: str) -> float:
        frames = lipsync(marks([("sil", 200), ("s", 120), ("t", 60), (vowel, 250)]), fps=60)
        return float(frames[round(0.26 * 60)][PUCKER])  # the middle of /s/

    assert pucker_during_s("uː") >= 0.2  # "stew": rounding shows through s and t
    assert pucker_during_s("iː") == pytest.approx(0.0, abs=1e-6)  # "steep": none


def test_weak_consonants_borrow_the_jaw_of_their_vowels(marks: MarksBuilder) -> None:
    frames = lipsync(marks([("ɑ", 200), ("k", 60), ("ɑ", 200)]), fps=60)
    k_mid = frames[round(0.23 * 60)]
    assert k_mid[JAW] > SHAPES[Viseme.KK].pose["jawOpen"] + 0.1  # pulled open by the /a/s


def test_every_weight_stays_in_range_for_random_utterances(marks: MarksBuilder) -> None:
    rng = np.random.default_rng(20240601)
    inventory = [
        *["sil", "", " ", ",", "ˈ", "3", "˥˩", "ˈa", "iː", "ʊ", "oʊ", "ɑːɹ", "tʃ"],
        *["p", "b", "m", "f", "θ", "t", "k", "ʃ", "s", "n", "ɹ", "ə", "ts.h", "iɛ", "Ж"],
        *["zh", "ang3", "xie4", "hao3", "nü3", "er2", "m", "p"],
    ]
    for trial in range(200):
        count = int(rng.integers(0, 40))
        phones = [
            (inventory[int(rng.integers(len(inventory)))], float(rng.choice([0.0, 5.0, 300.0])))
            if rng.random() < 0.1
            else (inventory[int(rng.integers(len(inventory)))], float(rng.uniform(10, 250)))
            for _ in range(count)
        ]
        utterance = marks(phones)
        fps = 60 if trial % 2 else 30
        notation = Notation.PINYIN if trial % 3 == 0 else Notation.IPA
        total = sum(d for _, d in phones)
        frames = lipsync(utterance, fps=fps, duration_ms=total, notation=notation)
        assert frames.shape == (frame_count(total / 1000, fps), 52)
        assert frames.dtype == np.float32
        assert np.isfinite(frames).all()
        assert ((frames >= 0.0) & (frames <= 1.0)).all()
        for span in viseme_spans(utterance, notation):
            if span.viseme is Viseme.PP and span.end_s <= total / 1000 and len(frames):
                inside = frames_inside(span.start_s * 1000, span.end_s * 1000, fps)
                inside = [k for k in inside if k < len(frames)]
                rows = inside or [min(round(span.center_s * fps), len(frames) - 1)]
                for k in rows:
                    assert_closed(frames[k])


# --- clips and replies ------------------------------------------------------------------------


def test_a_speech_clip_maps_media_time_to_frames(marks: MarksBuilder) -> None:
    clip = speech_clip(marks([("a", 500)]), 10.0, fps=30)
    assert isinstance(clip, SpeechClip) and clip.fps == 30 and len(clip.frames) == 15
    assert clip.end_s == pytest.approx(10.5)
    assert clip.frame_index(9.99) is None
    assert clip.frame_index(10.0) == 0
    assert clip.frame_index(10.0 + 1 / 30) == 1  # exactly on a frame time: that frame
    assert clip.frame_index(10.0 + 1.9 / 30) == 1
    assert clip.frame_index(10.499) == 14
    assert clip.frame_index(10.5) is None


def test_a_replys_chunks_join_into_one_timeline() -> None:
    first = TtsChunk(np.zeros(8000, np.int16), 16000, "Hi.", (PhonemeMark("h", 0, 100),))
    second = TtsChunk(np.zeros(4000, np.int16), 16000, "Bye.", (PhonemeMark("b", 10, 90),), True)
    joined, total_ms = concat_chunks([first, second])
    assert total_ms == pytest.approx(750.0)
    assert joined == (PhonemeMark("h", 0, 100), PhonemeMark("b", 510, 90))


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="fps"):
        LipsyncConfig(fps=0)
    with pytest.raises(ValueError, match="positive"):
        LipsyncConfig(lead_s=0)
    assert VisemeSpan(Viseme.AA, 0.1, 0.3).center_s == pytest.approx(0.2)


def test_speech_without_timings_gets_a_mouth_from_its_loudness() -> None:
    import numpy as np

    from kefu.ai_bridge.avatar.arkit import INDEX
    from kefu.ai_bridge.avatar.lipsync import envelope_clip

    rate = 22050
    t = np.arange(rate) / rate  # 1 s: 0.3 s silence, 0.4 s voice, 0.3 s silence
    voice = ((t > 0.3) & (t < 0.7)) * 12000 * np.sin(2 * np.pi * 180 * t)
    clip = envelope_clip(voice.astype(np.int16), rate, 5.0, fps=30)
    jaw = clip.frames[:, INDEX["jawOpen"]]
    assert clip.start_s == 5.0 and len(clip.frames) == 30
    assert jaw[:8].max() == 0.0  # shut before the voice
    assert jaw[12:20].min() > 0.3  # open while it sounds
    assert jaw[-3:].max() < 0.1  # closing again after it
    assert (clip.frames >= 0).all() and (clip.frames <= 1).all()
    assert np.count_nonzero(clip.frames.max(axis=0)) == 3  # jaw and lower lip only
    assert len(envelope_clip(np.zeros(0, np.int16), rate, 0.0).frames) == 0

"""The face driver: modes, blinks, gaze, listening, emotion over speech, barge-in."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, INDEX, SPEECH_OWNED
from kefu.ai_bridge.avatar.expression import (
    EMOTION_POSES,
    LISTENING_POSE,
    UnknownEmotion,
    emotion_vector,
)
from kefu.ai_bridge.avatar.face import (
    TRANSITIONS,
    FaceConfig,
    FaceDriver,
    FaceInput,
    FaceMode,
    next_mode,
)
from kefu.ai_bridge.avatar.idle import BlinkConfig, GazeConfig, gaze_weights
from kefu.ai_bridge.avatar.lipsync import SpeechClip, speech_clip
from kefu.ai_bridge.avatar.poses import SHAPES
from kefu.ai_bridge.avatar.visemes import Viseme
from kefu.ai_bridge.speak.base import EMOTIONS, PhonemeMark
from kefu.errors import InvalidTransition

MarksBuilder = Callable[[Sequence[tuple[str, float]]], tuple[PhonemeMark, ...]]
FPS = 30
BLINK = [INDEX["eyeBlinkLeft"], INDEX["eyeBlinkRight"]]
OWNED = list(SPEECH_OWNED)
JAW = INDEX["jawOpen"]
SMILE = [INDEX["mouthSmileLeft"], INDEX["mouthSmileRight"]]


def run(face: FaceDriver, start_s: float, seconds: float, fps: int = FPS) -> np.ndarray:
    first = round(start_s * fps)
    return np.stack([face.advance(k / fps) for k in range(first, first + round(seconds * fps))])


def gaze_xy(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = frames[:, INDEX["eyeLookOutRight"]] - frames[:, INDEX["eyeLookOutLeft"]]
    y = frames[:, INDEX["eyeLookUpLeft"]] - frames[:, INDEX["eyeLookDownLeft"]]
    return x, y


# --- the mode table ---------------------------------------------------------------------------


def test_mode_table() -> None:
    M, In = FaceMode, FaceInput
    assert next_mode(M.IDLE, In.CALLER_STARTS) is M.LISTENING
    assert next_mode(M.LISTENING, In.CALLER_STOPS) is M.IDLE
    assert next_mode(M.IDLE, In.SPEECH_STARTS) is M.SPEAKING
    assert next_mode(M.LISTENING, In.SPEECH_STARTS) is M.SPEAKING
    assert next_mode(M.SPEAKING, In.SPEECH_ENDS) is M.IDLE
    assert next_mode(M.SPEAKING, In.SPEECH_ENDS_OVER_CALLER) is M.LISTENING
    assert next_mode(M.SPEAKING, In.CALLER_STARTS) is M.SPEAKING
    assert {next_mode(m, In.BARGE_IN) for m in M} == {M.LISTENING}
    assert {next_mode(m, In.HOLD) for m in M} == {M.LISTENING}
    assert len(TRANSITIONS) == 16
    with pytest.raises(InvalidTransition, match="speech_ends"):
        next_mode(M.IDLE, In.SPEECH_ENDS)


# --- idle life --------------------------------------------------------------------------------


def test_blinks_happen_every_2_to_6_s_and_the_eyes_reopen() -> None:
    for seed in range(8):
        frames = run(FaceDriver(FaceConfig(seed=seed)), 0.0, 10.0)
        left, right = frames[:, BLINK[0]], frames[:, BLINK[1]]
        np.testing.assert_array_equal(left, right)  # both eyes together
        closed = left >= 0.5
        onsets = np.flatnonzero(closed[1:] & ~closed[:-1]) + 1
        assert 1 <= len(onsets) <= 5, seed
        assert all(2.0 - 0.1 <= gap / FPS <= 6.0 + 0.1 for gap in np.diff(onsets))
        for onset in onsets:
            assert left[onset - 1 : onset + 5].max() == 1.0  # fully shut for a frame
            assert (left[onset : onset + 6] >= 0.5).sum() <= 4  # ~150 ms, not a wink-and-hold
            assert left[onset + 4 : onset + 9].min() == 0.0  # open again
        assert left[: onsets[0] - 2].max() == 0.0  # before the first blink, wide open


def test_blink_schedule_is_seeded() -> None:
    a = run(FaceDriver(FaceConfig(seed=3)), 0.0, 12.0)
    b = run(FaceDriver(FaceConfig(seed=3)), 0.0, 12.0)
    c = run(FaceDriver(FaceConfig(seed=4)), 0.0, 12.0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[:, BLINK[0]], c[:, BLINK[0]])
    # the schedule depends on time, not on how often the face is read
    sparse = FaceDriver(FaceConfig(seed=3))
    assert np.array_equal(sparse.advance(5.0), a[150])


def test_the_face_is_never_frozen() -> None:
    for seed in range(5):
        frames = run(FaceDriver(FaceConfig(seed=seed)), 0.0, 20.0)
        x, y = gaze_xy(frames)
        for start in range(0, len(frames) - FPS + 1, 5):
            window = slice(start, start + FPS)
            # the gaze moves by at least two wire quantisation steps in every second
            assert max(np.ptp(x[window]), np.ptp(y[window])) >= 2 / 255, (seed, start)
        looks = [i for name, i in INDEX.items() if name.startswith("eyeLook")]
        assert frames[:, looks].max() <= 0.14 + 0.035 + 1e-6  # small: saccade + drift
        assert np.ptp(x) >= 0.1  # but real saccades, not only drift


def test_gaze_weights_turn_both_eyes_the_same_way() -> None:
    right_up = gaze_weights(0.1, 0.05)
    nonzero = {BLENDSHAPES[i]: round(float(right_up[i]), 3) for i in np.flatnonzero(right_up)}
    assert nonzero == {
        "eyeLookInLeft": 0.1,
        "eyeLookUpLeft": 0.05,
        "eyeLookOutRight": 0.1,
        "eyeLookUpRight": 0.05,
    }
    left_down = gaze_weights(-0.2, -0.1)
    assert {BLENDSHAPES[i] for i in np.flatnonzero(left_down)} == {
        "eyeLookOutLeft",
        "eyeLookInRight",
        "eyeLookDownLeft",
        "eyeLookDownRight",
    }
    assert not gaze_weights(0.0, 0.0).any()


def test_configs_reject_impossible_timings() -> None:
    with pytest.raises(ValueError):
        BlinkConfig(min_interval_s=3.0, max_interval_s=2.0)
    with pytest.raises(ValueError):
        BlinkConfig(min_interval_s=0.1, max_interval_s=0.2)
    with pytest.raises(ValueError):
        GazeConfig(saccade_s=1.0)


# --- listening --------------------------------------------------------------------------------


def test_listening_pose_comes_and_goes_with_the_caller() -> None:
    face = FaceDriver(FaceConfig(seed=1))
    before = run(face, 0.0, 1.0)
    face.caller_started()
    assert face.mode is FaceMode.LISTENING
    during = run(face, 1.0, 1.5)
    face.caller_stopped()
    assert face.mode is FaceMode.IDLE
    after = run(face, 2.5, 1.5)
    brow = INDEX["browInnerUp"]
    assert before[:, brow].max() == 0.0
    assert during[-1, brow] == pytest.approx(LISTENING_POSE["browInnerUp"], abs=0.005)
    assert during[-1, INDEX["browOuterUpLeft"]] == pytest.approx(0.08, abs=0.005)
    assert after[-1, brow] < 0.005
    assert not during[:, OWNED].any()  # attentive, not mouthing
    listen_x, _ = gaze_xy(during[15:])
    assert np.abs(listen_x).max() <= 0.35 * 0.14 + 0.035 + 0.01  # eyes held on the caller


# --- speaking ---------------------------------------------------------------------------------


def papa(marks: MarksBuilder) -> tuple[PhonemeMark, ...]:
    return marks([("sil", 100), ("p", 90), ("ˈɑː", 200), ("p", 80), ("ɑ", 200), ("sil", 130)])


def test_speech_frames_drive_the_mouth_on_the_media_clock(marks: MarksBuilder) -> None:
    face = FaceDriver(FaceConfig(seed=2))
    clip = speech_clip(papa(marks), 2.0, fps=FPS)
    face.speak(clip)
    run(face, 0.0, 2.0)
    assert face.mode is FaceMode.IDLE  # queued, not yet playing
    frames = run(face, 2.0, len(clip.frames) / FPS)
    assert face.mode is FaceMode.SPEAKING
    np.testing.assert_array_equal(frames[:, OWNED], clip.frames[:, OWNED])
    run(face, 2.0 + len(clip.frames) / FPS, 0.1)
    assert face.mode is FaceMode.SPEAKING  # hangover: the next clause may follow
    tail = run(face, 2.0 + len(clip.frames) / FPS + 0.1, 0.5)
    assert face.mode is FaceMode.IDLE
    assert not tail[:, OWNED].any()


def test_speech_ending_while_the_caller_talks_leaves_the_face_listening(
    marks: MarksBuilder,
) -> None:
    face = FaceDriver()
    face.speak(speech_clip(marks([("a", 300)]), 0.0))
    run(face, 0.0, 0.2)
    face.caller_started()
    assert face.mode is FaceMode.SPEAKING
    run(face, 0.2, 1.0)
    assert face.mode is FaceMode.LISTENING


def test_barge_in_closes_the_mouth_within_one_frame(marks: MarksBuilder) -> None:
    face = FaceDriver(FaceConfig(seed=9))
    face.set_emotion("happy")
    clip = speech_clip(papa(marks), 0.0, fps=FPS)
    face.speak(clip)
    face.speak(speech_clip(marks([("a", 500)]), clip.end_s))  # the next clause, queued
    open_vowel = round(0.29 * FPS)
    frames = run(face, 0.0, (open_vowel + 1) / FPS)
    assert frames[-1][JAW] >= 0.5  # mid-vowel, wide open
    now = (open_vowel + 0.4) / FPS  # the flush lands between two frames
    face.barge_in(now)
    assert face.mode is FaceMode.LISTENING
    assert face.take_reset() and not face.take_reset()
    at_once = face.advance(now)
    next_frame = face.advance((open_vowel + 1) / FPS)
    for row in (at_once, next_frame):
        assert not row[OWNED].any()  # jaw, lips, tongue: all at rest
        assert row[SMILE].min() >= 0.3  # the mood stays on the corners
    later = run(face, (open_vowel + 2) / FPS, 2.0)
    assert not later[:, OWNED].any()  # queued clauses were dropped with the audio
    # a lip-sync clip of audio queued before the flush arrives late: ignored
    face.speak(SpeechClip(now - 0.1, FPS, clip.frames))
    assert not face.advance(now + 3.0)[OWNED].any()
    assert face.queued_until_s is None


def test_held_audio_holds_the_lips_and_resumes_in_step(marks: MarksBuilder) -> None:
    face = FaceDriver(FaceConfig(seed=5))
    clip = speech_clip(papa(marks), 1.0, fps=FPS)
    face.speak(clip)
    before = run(face, 1.0, 0.3)  # frames 0..8 of the clip
    np.testing.assert_array_equal(before[:, OWNED], clip.frames[:9][:, OWNED])
    face.hold(1.3)  # the caller spoke over the bot: the track pauses at clip frame 9
    assert face.mode is FaceMode.LISTENING
    held = run(face, 1.3, 0.5)
    assert not held[:, OWNED].any()  # silent audio, resting mouth
    face.resume(1.8)  # a backchannel: the audio plays on from where it stopped
    after = run(face, 1.8, 0.2)
    assert face.mode is FaceMode.SPEAKING
    np.testing.assert_array_equal(after[:, OWNED], clip.frames[9:15][:, OWNED])
    assert face.queued_until_s == pytest.approx(clip.end_s + 0.5)


# --- emotion ----------------------------------------------------------------------------------


def test_emotions_move_brows_cheeks_and_corners_never_the_lips() -> None:
    assert set(EMOTION_POSES) == set(EMOTIONS)
    for emotion in EMOTIONS:
        vector = emotion_vector(emotion)
        assert not vector[OWNED].any(), emotion
    face = FaceDriver(FaceConfig(seed=4))
    run(face, 0.0, 0.5)
    face.set_emotion("happy")
    happy = run(face, 0.5, 1.5)[-1]
    assert happy[SMILE].tolist() == pytest.approx([0.55, 0.55], abs=0.01)
    assert happy[INDEX["cheekSquintLeft"]] == pytest.approx(0.35, abs=0.01)
    face.set_emotion("angry")
    angry = run(face, 2.0, 1.5)[-1]
    assert angry[INDEX["browDownLeft"]] == pytest.approx(0.6, abs=0.01)
    assert angry[SMILE].max() < 0.01
    face.set_emotion("sad", 0.5)
    sad = run(face, 3.5, 1.5)[-1]
    assert sad[INDEX["browInnerUp"]] == pytest.approx(0.275, abs=0.01)
    assert sad[INDEX["mouthFrownLeft"]] == pytest.approx(0.2, abs=0.01)
    with pytest.raises(UnknownEmotion):
        face.set_emotion("smug")
    with pytest.raises(ValueError):
        face.set_emotion("happy", 1.5)


def test_a_smile_does_not_stop_the_lips_closing_on_p(marks: MarksBuilder) -> None:
    utterance = papa(marks)
    times_ms = [k * 1000 / FPS for k in range(30)]
    closures = [k for k, ms in enumerate(times_ms) if 100 <= ms < 190 or 390 <= ms < 470]
    assert len(closures) == 6
    for emotion in ("neutral", "happy", "angry", "surprised", "fearful"):
        face = FaceDriver(FaceConfig(seed=6))
        face.set_emotion(emotion)
        run(face, 0.0, 2.0)  # the mood has settled
        clip = speech_clip(utterance, 2.0, fps=FPS)
        face.speak(clip)
        frames = run(face, 2.0, len(clip.frames) / FPS)
        for k in closures:
            row = frames[k]
            assert row[JAW] <= SHAPES[Viseme.PP].pose["jawOpen"] + 1e-6, (emotion, k)
            assert row[INDEX["mouthClose"]] >= row[JAW]
            assert row[INDEX["mouthPressLeft"]] >= 0.55 - 1e-6
            assert row[INDEX["mouthFunnel"]] == 0.0
        if emotion == "happy":
            # the smile is there during the /p/, scaled for speech (0.55 x 0.7)
            assert min(frames[k][SMILE].min() for k in closures) >= 0.55 * 0.7 - 0.01


def test_every_face_weight_stays_in_range(marks: MarksBuilder) -> None:
    rng = np.random.default_rng(11)
    face = FaceDriver(FaceConfig(seed=12))
    t = 0.0
    for _ in range(60):
        action = rng.integers(8)
        if action == 0:
            face.set_emotion(EMOTIONS[int(rng.integers(len(EMOTIONS)))], float(rng.random()))
        elif action == 1:
            face.speak(speech_clip(papa(marks), t + float(rng.random()), fps=FPS))
        elif action == 2:
            face.barge_in(t)
        elif action == 3:
            face.caller_started()
        elif action == 4:
            face.caller_stopped()
        elif action == 5:
            face.hold(t)
        elif action == 6:
            face.resume(t)
        frames = run(face, t, 0.3)
        t += 0.3
        assert np.isfinite(frames).all()
        assert ((frames >= 0.0) & (frames <= 1.0)).all()

"""The ONNX speech-emotion loader, tested with tiny real ONNX models built here (no mocks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.emotion import (
    EMOTIONS,
    EmotionEstimator,
    OnnxSpeechEmotion,
    SpeechEmotion,
    SpeechEmotionError,
)
from kefu.errors import LocalError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

SR = 16000
LABELS = ["neu", "hap", "sad", "ang", "fea", "sur", "disgust"]


def energy_model(
    path: Path,
    *,
    classes: int = len(LABELS),
    samples: int | str = "samples",
    softmax: bool = False,
    inputs: int = 1,
) -> None:
    """logits = mean(x²) · W + b: loud audio scores "ang", quiet audio "neu"."""
    w = np.zeros((1, classes), np.float32)
    b = np.zeros(classes, np.float32)
    w[0, min(3, classes - 1)] = 200.0  # angry grows with energy
    b[0] = 2.0  # neutral wins on quiet audio
    nodes = [
        helper.make_node("Mul", ["audio", "audio"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["energy"], axes=[1], keepdims=1),
        helper.make_node("MatMul", ["energy", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["logits"]),
    ]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], axis=-1))
        out = "probs"
    graph_inputs = [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, samples])]
    if inputs == 2:
        graph_inputs.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1]))
    graph = helper.make_graph(
        nodes,
        "energy_emotion",
        graph_inputs,
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.flatten().tolist()),
            helper.make_tensor("B", TensorProto.FLOAT, b.shape, b.tolist()),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    energy_model(tmp_path / "model.onnx")
    (tmp_path / "labels.json").write_text(json.dumps(LABELS))
    return tmp_path


def loud(voice: Callable[..., np.ndarray]) -> np.ndarray:
    return voice([220.0, 300.0], level=1.0, clip=True, seconds=1.5)


def quiet(voice: Callable[..., np.ndarray]) -> np.ndarray:
    return voice([120.0], level=0.02, seconds=1.5)


def test_loader_classifies_with_the_model(
    model_dir: Path, voice: Callable[..., np.ndarray]
) -> None:
    se = OnnxSpeechEmotion(model_dir)
    assert isinstance(se, SpeechEmotion)
    se.load()
    assert se.labels == tuple(LABELS)
    hot, calm = se.classify(loud(voice)), se.classify(quiet(voice))
    assert len(hot) == len(EMOTIONS) and sum(hot) == pytest.approx(1.0)
    assert EMOTIONS[int(np.argmax(hot))] == "angry"
    assert EMOTIONS[int(np.argmax(calm))] == "neutral"


def test_fixed_length_input_and_probability_output(
    tmp_path: Path, voice: Callable[..., np.ndarray]
) -> None:
    energy_model(tmp_path / "model.onnx", samples=SR, softmax=True)
    doc = {"labels": LABELS, "output": "probabilities"}
    (tmp_path / "labels.json").write_text(json.dumps(doc))
    se = OnnxSpeechEmotion(tmp_path)
    se.load()
    # Longer and shorter than the model's 1 s window: cut or padded, never an error.
    long_loud = voice([220.0], level=1.0, clip=True, seconds=2.5)
    assert EMOTIONS[int(np.argmax(se.classify(long_loud)))] == "angry"
    short_quiet = voice([120.0], level=0.02, seconds=0.3)
    assert EMOTIONS[int(np.argmax(se.classify(short_quiet)))] == "neutral"


def _expect(model_dir: Path, match: str) -> None:
    se = OnnxSpeechEmotion(model_dir)
    with pytest.raises(SpeechEmotionError, match=match) as info:
        se.load()
    assert isinstance(info.value, LocalError)
    assert not se.ready


def test_missing_directory(tmp_path: Path) -> None:
    _expect(tmp_path / "nowhere", "does not exist")


def test_missing_model_file(model_dir: Path) -> None:
    (model_dir / "model.onnx").unlink()
    _expect(model_dir, "model.onnx is missing")


def test_missing_labels(model_dir: Path) -> None:
    (model_dir / "labels.json").unlink()
    _expect(model_dir, "labels.json is missing")


def test_labels_not_json(model_dir: Path) -> None:
    (model_dir / "labels.json").write_text("neutral, angry")
    _expect(model_dir, "not valid JSON")


def test_labels_wrong_shape(model_dir: Path) -> None:
    (model_dir / "labels.json").write_text(json.dumps({"labels": "angry"}))
    _expect(model_dir, "non-empty list")


def test_labels_count_differs_from_model_output(model_dir: Path) -> None:
    (model_dir / "labels.json").write_text(json.dumps(LABELS[:5]))
    _expect(model_dir, "output has 7 classes but labels.json names 5")


def test_unknown_label(model_dir: Path) -> None:
    (model_dir / "labels.json").write_text(json.dumps([*LABELS[:6], "bored"]))
    _expect(model_dir, "'bored' maps to none")


def test_bad_output_kind(model_dir: Path) -> None:
    (model_dir / "labels.json").write_text(json.dumps({"labels": LABELS, "output": "scores"}))
    _expect(model_dir, "'output' must be")


def test_broken_model_file(model_dir: Path) -> None:
    (model_dir / "model.onnx").write_bytes(b"\x08\x07not a protobuf at all" * 10)
    _expect(model_dir, "cannot be loaded")


def test_model_with_two_inputs(model_dir: Path) -> None:
    energy_model(model_dir / "model.onnx", inputs=2)
    _expect(model_dir, "expected one input")


def test_classify_before_load(model_dir: Path) -> None:
    with pytest.raises(SpeechEmotionError, match="not loaded"):
        OnnxSpeechEmotion(model_dir).classify(np.zeros(SR, np.int16))


def test_estimator_fuses_the_speech_model(
    estimator: EmotionEstimator, model_dir: Path, voice: Callable[..., np.ndarray]
) -> None:
    fused = EmotionEstimator(estimator.text_model, OnnxSpeechEmotion(model_dir))
    assert fused.load() and fused.speech is not None
    text = "I'd like to know when the technician is coming"
    words_only = estimator.estimate(text, "en", loud(voice))
    with_model = fused.estimate(text, "en", loud(voice))
    assert with_model.speech_label == "angry"
    assert with_model.score("angry") > words_only.score("angry") + 0.2
    assert with_model.valence < words_only.valence
    assert fused.estimate(text, "en", quiet(voice)).label == "neutral"


def test_estimator_runs_without_a_broken_speech_model(
    estimator: EmotionEstimator, tmp_path: Path
) -> None:
    fused = EmotionEstimator(estimator.text_model, OnnxSpeechEmotion(tmp_path / "missing"))
    assert fused.load()
    assert fused.speech is None
    assert fused.speech_error is not None and "does not exist" in fused.speech_error
    emo = fused.estimate("thank you so much, that fixed it", "en", None)
    assert emo.label == "happy" and emo.confidence > 0

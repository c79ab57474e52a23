"""The numpy MiniLM forward pass against published and committed reference values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.dialog.embed import DIM, Embedder

GOLDEN = Path(__file__).parent / "golden" / "minilm_ref.npy"
GOLDEN_TEXTS = ["Where is my order?", "退款多久到账", "The cat sat on the mat."]


def test_matches_sentence_transformers_published_similarities(embedder: Embedder) -> None:
    # The sentence-transformers README prints this matrix for all-MiniLM-L6-v2 (4 decimals).
    v = embedder.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    sims = v @ v.T
    assert abs(sims[0, 1] - 0.6660) < 6e-5
    assert abs(sims[0, 2] - 0.1046) < 6e-5
    assert abs(sims[1, 2] - 0.1411) < 6e-5


def test_unit_length_and_shape(embedder: Embedder) -> None:
    v = embedder.embed(["hello", "a much longer sentence about refunds and deliveries", ""])
    assert v.shape == (3, DIM) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_paraphrases_close_unrelated_far(embedder: Embedder) -> None:
    a, b, c = embedder.embed(
        [
            "How do I reset my password?",
            "How can I reset my password?",
            "What time does the football match start?",
        ]
    )
    assert a @ b > 0.7
    assert a @ c < 0.3


def test_batching_and_padding_do_not_change_vectors(embedder: Embedder) -> None:
    texts = ["short", "a considerably longer sentence that forces padding of the short one"]
    batch = embedder.embed(texts)
    for i, t in enumerate(texts):
        assert np.abs(batch[i] - embedder.embed_one(t)).max() < 1e-5


def test_golden_vectors(embedder: Embedder) -> None:
    # Computed once by this implementation after it matched the published values above;
    # guards against regressions (tokenizer settings, weight layout, GELU).
    ref = np.load(GOLDEN)
    got = embedder.embed(GOLDEN_TEXTS)
    assert np.abs(got - ref).max() < 1e-4
    assert np.min(np.sum(got * ref, axis=1)) > 1 - 1e-6


def test_missing_model_reports_not_ready(tmp_path: Path) -> None:
    e = Embedder(tmp_path)
    assert not e.ready
    assert e.error
    with pytest.raises(RuntimeError, match="not ready"):
        e.embed(["x"])

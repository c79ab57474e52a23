"""The dialog's disk cache: arrays once per key (recomputed when they do not fit), and
sentence vectors once per sentence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.dialog.disk_cache import cached_arrays, cached_vectors


def test_arrays_are_computed_once_per_key_and_recomputed_when_they_do_not_fit(
    tmp_path: Path,
) -> None:
    calls: list[int] = []

    def make(n: int) -> dict[str, np.ndarray]:
        calls.append(n)
        return {"v": np.arange(n, dtype=np.float32)}

    first = cached_arrays(tmp_path, "t", b"k", lambda: make(3), lambda a: a["v"].shape == (3,))
    again = cached_arrays(tmp_path, "t", b"k", lambda: make(3), lambda a: a["v"].shape == (3,))
    assert calls == [3] and list(again["v"]) == list(first["v"]) == [0, 1, 2]
    # the same key, but the caller now expects another shape: computed again and replaced
    grown = cached_arrays(tmp_path, "t", b"k", lambda: make(4), lambda a: a["v"].shape == (4,))
    assert calls == [3, 4] and list(grown["v"]) == [0, 1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == [next(tmp_path.glob("t-*.npz")).name]
    # another key, another file; no directory, no file at all
    cached_arrays(tmp_path, "t", b"other", lambda: make(2), lambda a: True)
    assert len(list(tmp_path.glob("t-*.npz"))) == 2
    cached_arrays(None, "t", b"k", lambda: make(1), lambda a: True)
    assert calls == [3, 4, 2, 1]
    # a damaged file is computed again and replaced
    for damaged in tmp_path.glob("t-*.npz"):
        damaged.write_bytes(damaged.read_bytes()[:100])
    cached_arrays(tmp_path, "t", b"k", lambda: make(4), lambda a: a["v"].shape == (4,))
    assert calls == [3, 4, 2, 1, 4]
    again4 = cached_arrays(tmp_path, "t", b"k", lambda: make(4), lambda a: a["v"].shape == (4,))
    assert calls == [3, 4, 2, 1, 4] and list(again4["v"]) == [0, 1, 2, 3]


class _Counting:
    name, dim = "counting-model", 2

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed(self, texts: list[str], *, batch_size: int = 32) -> NDArray[np.float32]:
        self.embedded += texts
        return np.array([[len(t), 1.0] for t in texts], np.float32)


class _Wider(_Counting):
    dim = 3

    def embed(self, texts: list[str], *, batch_size: int = 32) -> NDArray[np.float32]:
        return np.ones((len(texts), 3), np.float32)


def test_sentence_vectors_are_embedded_once_per_sentence_across_lists_and_starts(
    tmp_path: Path,
) -> None:
    model = _Counting()
    first = cached_vectors(tmp_path, model, ["ab", "c", "ab"])  # type: ignore[arg-type]
    assert model.embedded == ["ab", "c"] and first[:, 0].tolist() == [2, 1, 2]
    # Another list sharing a sentence, then a fresh start (a new process reads the store).
    cached_vectors(tmp_path, model, ["c", "defg"])  # type: ignore[arg-type]
    restarted = _Counting()
    again = cached_vectors(tmp_path, restarted, ["defg", "ab", "c"])  # type: ignore[arg-type]
    assert model.embedded == ["ab", "c", "defg"] and restarted.embedded == []
    assert again[:, 0].tolist() == [4, 2, 1] and again.dtype == np.float32
    assert [p.name for p in tmp_path.iterdir()] == [next(tmp_path.glob("sentence-vectors-*")).name]
    # A store of another vector size (a changed model under the same name) is not trusted.
    wider = _Wider()
    assert cached_vectors(tmp_path, wider, ["ab"]).shape == (1, 3)  # type: ignore[arg-type]
    # A damaged store is re-made; no cache dir: embedded every time; nothing: nothing.
    store = next(tmp_path.glob("sentence-vectors-*"))
    store.write_bytes(b"not a zip")
    fresh = _Counting()
    cached_vectors(tmp_path, fresh, ["ab"])  # type: ignore[arg-type]
    assert fresh.embedded == ["ab"]
    store.write_bytes(store.read_bytes()[:200])  # cut short: a zip without its directory
    cached_vectors(tmp_path, fresh, ["ab"])  # type: ignore[arg-type]
    assert fresh.embedded == ["ab", "ab"]
    cached_vectors(None, fresh, ["ab"])  # type: ignore[arg-type]
    assert fresh.embedded == ["ab", "ab", "ab"]
    assert cached_vectors(tmp_path, fresh, []).shape == (0, 2)  # type: ignore[arg-type]

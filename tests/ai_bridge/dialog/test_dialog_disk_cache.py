"""cached_arrays: computed once per key, reloaded after, recomputed when the file does not fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kefu.ai_bridge.dialog.disk_cache import cached_arrays


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

"""Arrays the dialog computes at start (example vectors, the learned scorer's weights), kept
in the cache directory under a hash of what they were computed from: only the first start
after an edit pays for them. Files are written whole or not at all (a temporary name, then
``os.replace``), so concurrent starts never read half a file."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .embed import TextEncoder

__all__ = ["cached_arrays", "cached_vectors"]

Arrays = dict[str, NDArray[Any]]


def cached_arrays(
    cache_dir: str | Path | None,
    name: str,
    key: bytes,
    make: Callable[[], Arrays],
    fits: Callable[[Arrays], bool],
) -> Arrays:
    """The arrays ``make`` returns, from ``<cache_dir>/<name>-<hash of key>.npz`` when that
    file exists and ``fits`` them (right shapes), else computed and saved there. Without a
    ``cache_dir`` they are computed every time."""
    if cache_dir is None:
        return make()
    path = Path(cache_dir) / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.npz"
    if path.exists():
        with np.load(path) as z:
            stored = {k: z[k] for k in z.files}
        if fits(stored):
            return stored
    arrays = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return arrays


def cached_vectors(
    cache_dir: str | Path | None, name: str, embedder: TextEncoder, texts: list[str]
) -> NDArray[np.float32]:
    """``embedder``'s vectors of ``texts``, kept as ``<name>-<hash>.npz`` keyed by the model's
    name and the texts: a few hundred sentences take seconds to embed on 2 cores, so only the
    first start after an edit pays for them."""
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    arrays = cached_arrays(
        cache_dir,
        name,
        "\n".join((embedder.name, *texts)).encode(),
        lambda: {"vectors": embedder.embed(texts)},
        lambda a: a["vectors"].shape == (len(texts), embedder.dim),
    )
    return np.asarray(arrays["vectors"], dtype=np.float32)

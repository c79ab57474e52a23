"""Arrays the dialog computes at start, kept in the cache directory: the learned scorer's
weights under a hash of what they were computed from (:func:`cached_arrays`), and sentence
vectors one by one in a store per model (:func:`cached_vectors`), so only the first start
after an edit pays, and only for what changed. Files are written whole or not at all (a
temporary name, then ``os.replace``), so concurrent starts never read half a file."""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Callable, Sequence
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
    stored = _read(path)
    if stored is not None and fits(stored):
        return stored
    arrays = make()
    _write(path, arrays)
    return arrays


def cached_vectors(
    cache_dir: str | Path | None, embedder: TextEncoder, texts: Sequence[str]
) -> NDArray[np.float32]:
    """``embedder``'s vectors of ``texts``, kept per sentence in one store per model,
    ``<cache_dir>/sentence-vectors-<hash of the model name>.npz``: a few thousand sentences
    take a minute to embed on 2 cores, so a start embeds only the sentences no earlier start
    did (an edited KB or callers' file costs its new lines only, and a sentence used twice, a
    KB phrasing in the index and among the intent examples, is embedded once). Concurrent
    starts may each write the store; the last whole file wins and what it lacks is embedded
    again next time. Without a ``cache_dir`` everything is embedded."""
    if not texts:
        return np.zeros((0, embedder.dim), np.float32)
    if cache_dir is None:
        return np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    digest = hashlib.sha256(embedder.name.encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"sentence-vectors-{digest}.npz"
    known = _read_store(path, embedder.dim)
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        fresh = np.asarray(embedder.embed(missing), dtype=np.float32)
        known.update(zip(missing, fresh, strict=True))
        _write(path, {"texts": np.array(list(known)), "vectors": np.stack(list(known.values()))})
    return np.stack([known[t] for t in texts]).astype(np.float32)


def _read(path: Path) -> Arrays | None:
    """The arrays in ``path``; None when it is missing or damaged (a half-copied cache dir):
    they are computed again."""
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def _read_store(path: Path, dim: int) -> dict[str, NDArray[np.float32]]:
    """The store's sentence -> vector map; empty when missing, unreadable or of another size."""
    z = _read(path) or {}
    texts, vectors = z.get("texts"), z.get("vectors")
    if texts is None or vectors is None or vectors.shape != (len(texts), dim):
        return {}
    return dict(zip(texts.tolist(), vectors.astype(np.float32), strict=True))


def _write(path: Path, arrays: Arrays) -> None:
    """``arrays`` saved whole at ``path``: written under a temporary name, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)

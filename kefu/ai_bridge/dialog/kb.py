"""Knowledge base: import (see kb_formats for the source formats), the stored index, loading.

Import is all-or-nothing: every file is parsed and validated before anything is written; the
index is built in a temporary directory beside the target and renamed into place, so a reader
never sees half an index and a bad file leaves the previous knowledge base untouched.

Stored layout of a knowledge-base directory::

    entries.json   list of entries (id, question, answer, intent, lang, tags, alt_questions)
    bm25/          bm25s index over question + alternatives + answer (see text.tokenize)
    vectors.npy    sentence vectors (float32, unit length; the model named in meta.json), one
                   row per question phrasing
    rows.npy       entry index of each vectors.npy row
    callers.json   labelled callers' turns imported with the entries (see callers.py); the
                   learned scorer trains on them, the retriever does not index them
    meta.json      format version, model name, counts
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from .callers import CallerTurn, read_callers
from .disk_cache import cached_vectors
from .embed import TextEncoder
from .kb_formats import (
    CALLERS_SUFFIX,
    LANGS,
    KbEntry,
    KbImportError,
    expand_paths,
    is_callers_file,
    parse_csv,
    parse_files,
    parse_jsonl,
    parse_markdown,
)
from .text import tokenize

__all__ = [
    "LANGS",
    "ImportReport",
    "KbEntry",
    "KbImportError",
    "KnowledgeBase",
    "default_kb_files",
    "import_kb",
    "parse_csv",
    "parse_files",
    "parse_jsonl",
    "parse_markdown",
]

log = structlog.get_logger(__name__)

FORMAT_VERSION = 1
# Spoken answers longer than this take > ~20 s of TTS; imported anyway, with a warning.
_LONG_ANSWER_CHARS = 400


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What ``import_kb`` did."""

    target_dir: str
    """Where the index now lives."""
    files: tuple[str, ...]
    """Files imported, in order."""
    entries: int
    """Number of entries stored."""
    by_lang: dict[str, int] = field(default_factory=dict)
    """Entries per language."""
    callers: int = 0
    """Labelled callers' turns stored (``*.callers.jsonl`` files)."""
    warnings: tuple[str, ...] = ()
    """Non-fatal findings (e.g. answers too long to speak comfortably)."""
    seconds: float = 0.0
    """Wall time of the import, index build included."""


# --- index -------------------------------------------------------------------------------


def _doc_tokens(e: KbEntry) -> list[str]:
    return tokenize(" ".join((*e.phrasings(), e.answer)))


def build_index(
    entries: Sequence[KbEntry],
    out_dir: Path,
    embedder: TextEncoder | None,
    callers: Sequence[CallerTurn] = (),
    vectors_cache: str | Path | None = None,
) -> None:
    """Write the stored index for ``entries`` (and their ``callers``) into the (existing,
    empty) ``out_dir``; phrasings already in the sentence store under ``vectors_cache``
    (:func:`.disk_cache.cached_vectors`) are not embedded again."""
    import bm25s

    retriever = bm25s.BM25()
    retriever.index([_doc_tokens(e) for e in entries], show_progress=False)
    retriever.save(str(out_dir / "bm25"), show_progress=False)
    vectors, rows = phrasing_vectors(entries, embedder, vectors_cache)
    np.save(out_dir / "vectors.npy", vectors)
    np.save(out_dir / "rows.npy", rows)
    (out_dir / "entries.json").write_text(
        json.dumps([e.to_json() for e in entries], ensure_ascii=False, indent=1), encoding="utf-8"
    )
    (out_dir / "callers.json").write_text(
        json.dumps([c.to_json() for c in callers], ensure_ascii=False, indent=0), encoding="utf-8"
    )
    meta = {
        "format": FORMAT_VERSION,
        "model": embedder.name if embedder is not None and len(rows) else None,
        "entries": len(entries),
    }
    (out_dir / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def phrasing_vectors(
    entries: Sequence[KbEntry],
    embedder: TextEncoder | None,
    vectors_cache: str | Path | None = None,
) -> tuple[NDArray[Any], NDArray[Any]]:
    """(vectors, entry index per row) over every question phrasing; empty without a model."""
    texts: list[str] = []
    rows: list[int] = []
    for i, e in enumerate(entries):
        for q in e.phrasings():
            texts.append(q)
            rows.append(i)
    if embedder is None or not embedder.ready:
        return np.zeros((0, 384), dtype=np.float32), np.zeros(0, dtype=np.int32)
    return cached_vectors(vectors_cache, embedder, texts), np.asarray(rows, dtype=np.int32)


def _atomic_replace(tmp: Path, target: Path) -> None:
    # rename() cannot replace a non-empty directory; move the old one aside first so the
    # swap window is two renames, and put it back if the second fails.
    old: Path | None = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _install_once(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target`` unless ``target`` is there already (then drop ``tmp``)."""
    try:
        os.rename(tmp, target)
    except OSError:
        if not (target / "meta.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def import_kb(
    paths: Sequence[str | Path],
    target_dir: str | Path,
    *,
    embedder: TextEncoder | None = None,
    replace: bool = True,
    vectors_cache: str | Path | None = None,
) -> ImportReport:
    """Validate ``paths`` fully, then build the index and atomically install it at ``target_dir``.

    Raises KbImportError (naming file and line) before anything is written. Without a ready
    embedder the index has BM25 only (vector search is then skipped at query time). With
    ``replace=False`` an index another process installed at ``target_dir`` meanwhile is kept
    and this one dropped (a cache keyed by content: either copy is the same, and a reader of
    the first must not see it moved away). ``vectors_cache``: a directory whose sentence store
    (:func:`.disk_cache.cached_vectors`) supplies, and keeps, the phrasing vectors.
    """
    t0 = time.perf_counter()
    entries = parse_files(paths)
    callers = read_callers([p for p in expand_paths(paths) if is_callers_file(p)], entries)
    target = Path(target_dir).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        build_index(entries, tmp, embedder, callers, vectors_cache)
        if replace:
            _atomic_replace(tmp, target)
        else:
            _install_once(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    by_lang: dict[str, int] = {}
    warnings = []
    for e in entries:
        by_lang[e.lang] = by_lang.get(e.lang, 0) + 1
        if len(e.answer) > _LONG_ANSWER_CHARS:
            warnings.append(f"{e.source}: answer is {len(e.answer)} chars; long to speak")
    report = ImportReport(
        target_dir=str(target),
        files=tuple(str(p) for p in expand_paths(paths)),
        entries=len(entries),
        by_lang=by_lang,
        callers=len(callers),
        warnings=tuple(warnings),
        seconds=time.perf_counter() - t0,
    )
    log.info("kb.imported", target=str(target), entries=len(entries), by_lang=by_lang)
    return report


class KnowledgeBase:
    """A loaded index: entries, their BM25 index and phrasing vectors. Read-only."""

    def __init__(
        self,
        entries: list[KbEntry],
        bm25: object,
        vectors: NDArray[Any],
        rows: NDArray[Any],
        directory: Path | None = None,
        model: str | None = None,
        callers: Sequence[CallerTurn] = (),
    ) -> None:
        self.entries = entries
        self.bm25 = bm25
        self.vectors = vectors
        self.rows = rows
        self.directory = directory
        self.model = model
        """Name of the model that made ``vectors`` (None: no vectors)."""
        self.by_id = {e.id: e for e in entries}
        self.callers = tuple(callers)
        """Labelled callers' turns (training text for the learned scorer)."""

    @classmethod
    def load(cls, directory: str | Path) -> KnowledgeBase:
        import bm25s

        d = Path(directory)
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT_VERSION:
            raise KbImportError(
                d / "meta.json", 1, f"index format {meta.get('format')} unsupported"
            )
        raw = json.loads((d / "entries.json").read_text(encoding="utf-8"))
        entries = [KbEntry.from_json(x) for x in raw]
        bm25 = bm25s.BM25.load(str(d / "bm25"), show_progress=False)
        vectors = np.load(d / "vectors.npy")
        rows = np.load(d / "rows.npy")
        path = d / "callers.json"
        raw = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
        callers = [CallerTurn.from_json(x) for x in raw]
        return cls(entries, bm25, vectors, rows, d, meta.get("model"), callers)

    @classmethod
    def default(cls, cache_dir: str | Path, embedder: TextEncoder | None) -> KnowledgeBase:
        """The embedded retail KB, indexed once and cached under ``cache_dir``.

        The cache key hashes the data files and the embedding model (if any), so editing the
        shipped KB or changing the model rebuilds it.
        """
        files = default_kb_files()
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        h.update(embedder.name.encode() if embedder is not None and embedder.ready else b"novec")
        target = Path(cache_dir) / f"default-kb-{h.hexdigest()[:16]}"
        if not (target / "meta.json").exists():  # another process may be building it too
            import_kb(files, target, embedder=embedder, replace=False, vectors_cache=cache_dir)
        return cls.load(target)

    def with_vectors(self, embedder: TextEncoder | None) -> KnowledgeBase:
        """This KB with phrasing vectors from ``embedder``: itself when they already are
        (an index imported with another model, or none, is embedded in memory, ~1 s)."""
        if embedder is None or not embedder.ready or self.model == embedder.name:
            return self
        vectors, rows = phrasing_vectors(self.entries, embedder)
        log.info("kb.reembedded", model=embedder.name, was=self.model, rows=len(rows))
        return KnowledgeBase(
            self.entries, self.bm25, vectors, rows, self.directory, embedder.name, self.callers
        )

    def bm25_scores(self, tokens: list[str]) -> NDArray[Any]:
        if not tokens:
            return np.zeros(len(self.entries), dtype=np.float32)
        return np.asarray(self.bm25.get_scores(tokens), dtype=np.float32)  # type: ignore[attr-defined]


def default_kb_files() -> list[Path]:
    """The bundled knowledge base: its Markdown files and their labelled callers' turns."""
    d = Path(__file__).resolve().parent.parent / "data" / "kb"
    return sorted([*d.glob("*.md"), *d.glob(f"*{CALLERS_SUFFIX}")])

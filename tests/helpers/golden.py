"""Golden files of text pairs: one ``input<TAB>expected`` per line, ``#`` comments."""

from __future__ import annotations

from pathlib import Path


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """The (input, expected) rows of a golden TSV file, in file order."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            source, expected = line.split("\t")
            rows.append((source, expected))
    return rows

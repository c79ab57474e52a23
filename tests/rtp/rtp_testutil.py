"""Helpers shared by the RTP tests (a plain module: pytest puts tests/rtp on sys.path)."""

from __future__ import annotations

from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> bytes:
    """Bytes of a .hex golden file: hex pairs; whitespace and '#' comments are ignored."""
    lines = (line.split("#", 1)[0] for line in (GOLDEN / name).read_text().splitlines())
    return bytes.fromhex("".join(lines))

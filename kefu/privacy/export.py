"""``kefu decrypt`` and ``kefu keygen``: an authorised export of sealed personal data.

``decrypt`` reads a sealed recording (``.wav.sm4``) or an interaction log whose lines are
sealed (``sm4:...``; lines in the clear pass through, so a log sealed from some day on reads
whole) and writes the plaintext, to a temporary name first: a wrong key or a changed file
leaves no partial output.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from kefu.privacy.seal import FILE_MAGIC, LINE_PREFIX, Sealer, SealError, load_key

__all__ = ["decrypt", "keygen"]


def keygen(path: Path) -> None:
    """Write a new random key as 32 hex characters, readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_bytes(16).hex() + "\n")


def decrypt(source: Path, key_file: Path, target: Path) -> str:
    """Decrypt ``source`` into ``target``; returns what was done, in words. SealError when
    it does not open, ConfigError for a bad key file, OSError for the files themselves."""
    sealer = Sealer(load_key(key_file))
    part = target.with_name(target.name + ".part")
    try:
        with source.open("rb") as src:
            sealed_file = src.read(len(FILE_MAGIC)) == FILE_MAGIC
        if sealed_file:
            with source.open("rb") as src, part.open("wb") as out:
                for chunk in sealer.open_file(src):
                    out.write(chunk)
            what = "recording"
        else:
            opened = clear = 0
            with source.open(encoding="utf-8") as src, part.open("w", encoding="utf-8") as out:
                for n, line in enumerate(src, 1):
                    if line.startswith(LINE_PREFIX):
                        try:
                            out.write(sealer.open_line(line) + "\n")
                        except SealError as exc:
                            raise SealError(f"line {n}: {exc}") from None
                        opened += 1
                    elif line.strip():
                        out.write(line if line.endswith("\n") else line + "\n")
                        clear += 1
            what = f"log: {opened} sealed lines opened, {clear} in the clear"
        os.replace(part, target)
    finally:
        with contextlib.suppress(OSError):
            part.unlink()
    return f"{source} -> {target} ({what})"

"""SM4 encryption of personal data at rest (GB/T 32907, as the customer's design asks).

SM4 in GCM mode (authenticated: a changed byte is an error, not garbage) through
``cryptography``. The key is 16 bytes read from a key file (``privacy.key_file``): the raw
bytes, or 32 hexadecimal characters (one line, as ``kefu keygen`` writes it). Two forms:

* a **line** (the interaction log, one JSON record per line): ``sm4:`` followed by base64 of
  nonce (12 bytes) | ciphertext | tag (16 bytes), so the log stays append-only, line by line;
* a **file** (a recording): ``KEFUSM4`` and a version byte, then chunks of up to 1 MiB, each
  ``length (4 bytes, big-endian) | nonce | ciphertext | tag``; the chunk's index and whether
  it is the last are authenticated with it, so chunks cannot be reordered or cut off.

A fresh random nonce per line or chunk. ``kefu decrypt`` reverses both for an authorised
export.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from kefu.errors import ConfigError

__all__ = ["LINE_PREFIX", "FILE_MAGIC", "SealError", "Sealer", "load_key"]

LINE_PREFIX = "sm4:"
FILE_MAGIC = b"KEFUSM4\x01"
CHUNK = 1 << 20
_NONCE, _TAG = 12, 16


class SealError(ValueError):
    """Sealed data that does not open: a wrong key, or data changed or cut short."""


def load_key(path: str | Path) -> bytes:
    """The 16-byte key in ``path`` (raw, or 32 hex characters); ConfigError naming it."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"privacy.key_file {path}: {exc.strerror or exc}", key="privacy.key_file"
        ) from None
    text = data.strip()
    if len(text) == 32:
        try:
            return bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    if len(data) == 16:
        return data
    raise ConfigError(
        f"privacy.key_file {path}: expected 16 raw bytes or 32 hex characters",
        key="privacy.key_file",
    )


class Sealer:
    """Seals and opens lines and files with one SM4 key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 16:
            raise ValueError("an SM4 key is 16 bytes")
        self._algorithm = algorithms.SM4(key)

    def _seal(self, plain: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        encryptor = Cipher(self._algorithm, modes.GCM(nonce)).encryptor()
        encryptor.authenticate_additional_data(aad)
        body = encryptor.update(plain) + encryptor.finalize()
        return nonce + body + encryptor.tag

    def _open(self, sealed: bytes, aad: bytes) -> bytes:
        if len(sealed) < _NONCE + _TAG:
            raise SealError("sealed data too short")
        nonce, body, tag = sealed[:_NONCE], sealed[_NONCE:-_TAG], sealed[-_TAG:]
        decryptor = Cipher(self._algorithm, modes.GCM(nonce, tag)).decryptor()
        decryptor.authenticate_additional_data(aad)
        try:
            return decryptor.update(body) + decryptor.finalize()
        except InvalidTag:
            raise SealError("does not open with this key (wrong key or changed data)") from None

    # --- lines ----------------------------------------------------------------------------

    def seal_line(self, text: str) -> str:
        return LINE_PREFIX + base64.b64encode(self._seal(text.encode(), b"line")).decode()

    def open_line(self, line: str) -> str:
        line = line.strip()
        if not line.startswith(LINE_PREFIX):
            raise SealError("not a sealed line")
        try:
            sealed = base64.b64decode(line[len(LINE_PREFIX) :], validate=True)
        except ValueError:
            raise SealError("a sealed line's base64 is broken") from None
        return self._open(sealed, b"line").decode()

    # --- files ----------------------------------------------------------------------------

    def seal_file(self, source: BinaryIO, target: BinaryIO) -> None:
        target.write(FILE_MAGIC)
        index = 0
        chunk = source.read(CHUNK)
        while True:
            following = source.read(CHUNK)
            last = not following
            sealed = self._seal(chunk, struct.pack(">Q?", index, last))
            target.write(struct.pack(">I", len(sealed)) + sealed)
            if last:
                return
            chunk, index = following, index + 1

    def open_file(self, source: BinaryIO) -> Iterator[bytes]:
        """The plaintext, chunk by chunk; SealError for a wrong key or a changed or cut file."""
        if source.read(len(FILE_MAGIC)) != FILE_MAGIC:
            raise SealError("not a sealed file")
        index = 0
        while True:
            head = source.read(4)
            if len(head) != 4:
                raise SealError("the sealed file is cut short")
            (size,) = struct.unpack(">I", head)
            sealed = source.read(size)
            if len(sealed) != size or size > CHUNK + _NONCE + _TAG:
                raise SealError("the sealed file is cut short or corrupt")
            try:
                yield self._open(sealed, struct.pack(">Q?", index, False))
            except SealError:
                yield self._open(sealed, struct.pack(">Q?", index, True))
                if source.read(1):
                    raise SealError("data after the last chunk") from None
                return
            index += 1

"""Synthesized test voices, cached on disk: the same text always sounds the same, run after run,
and a slow voice (Kokoro: ~0.7 s of compute per second of audio) is paid for once.

Files live in ``$KEFU_TEST_VOICE_CACHE/<folder>`` (default ``~/.cache/kefu/<folder>``), one
``.npy`` per key, written atomically so parallel runs never read half a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["cached_audio"]


def cached_audio(folder: str, key: str, make: Callable[[], NDArray[Any]]) -> NDArray[Any]:
    """The array cached under ``key`` in ``folder``, made with ``make`` the first time."""
    root = os.environ.get("KEFU_TEST_VOICE_CACHE") or str(Path.home() / ".cache" / "kefu")
    path = Path(root) / folder / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npy"
    if path.is_file():
        return np.load(path)
    audio = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, audio)
    tmp.replace(path)
    return audio

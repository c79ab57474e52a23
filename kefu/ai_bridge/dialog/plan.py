"""What the dialog answers with: the :class:`Reply` a caller turn gets, and the :class:`Plan`
the manager makes for it before any sentence is streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from .kb import KbEntry
from .state import DialogState

SOURCES = ("kb", "llm", "fallback", "handoff", "clarify", "greeting")


@dataclass(frozen=True, slots=True)
class Reply:
    """The bot's answer to one caller turn."""

    intent: str
    """Classified intent of the turn (or of the question a slot answer completed)."""
    slots: Mapping[str, str]
    """All slots known for the call after this turn (normalised; see slots.py)."""
    source: str
    """One of SOURCES: where the words come from."""
    confidence: float
    """Retrieval confidence of the answer (1.0 for rule-based replies)."""
    handoff: bool
    """True when the call should go to a human agent now."""
    kb_ids: tuple[str, ...]
    """Knowledge-base entries the answer is grounded on."""
    sentences: AsyncIterator[str]
    """The answer, sentence by sentence (LLM replies stream)."""
    lang: str = "en"
    """Language of the answer."""
    chosen_ms: float = 0.0
    """Time from the turn's text to this Reply (answer chosen; first LLM sentence included)."""

    async def aclose(self) -> None:
        """Stop the answer (barge-in): closes an LLM stream still in flight."""
        aclose = getattr(self.sentences, "aclose", None)
        if aclose is not None:
            await aclose()


@dataclass(slots=True)
class Plan:
    """What the manager chose for a turn, before its sentences are streamed."""

    source: str
    intent: str
    state: DialogState
    lang: str
    confidence: float = 1.0
    handoff: bool = False
    sentences: list[str] = field(default_factory=list)
    hits: list[KbEntry] = field(default_factory=list)
    query: str = ""


async def iterate(items: list[str]) -> AsyncIterator[str]:
    """``items`` as a stream of sentences (a canned or KB answer spoken like an LLM's)."""
    for s in items:
        yield s

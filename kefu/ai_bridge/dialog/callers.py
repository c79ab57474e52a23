"""Callers' turns labelled with the entry that answers them: training text for the scorer.

A knowledge base's own phrasings (its headings and ``alt:`` lines) are how its author asks a
question; callers ask it in other words, with stories, fillers and misheard words. A file of
labelled callers' turns (``<name>.callers.jsonl``, one object per line)::

    {"text": "the kettle i got off you last week just died on me", "label": "en-warranty-claim"}
    {"text": "do you do gift wrapping", "label": "out_of_scope"}

teaches the learned scorer (:mod:`.learned`) what the entries sound like from the caller's
side, and what the knowledge base does not answer (:data:`OUT_OF_SCOPE`). The retriever does
not index them: an answer is still matched to the KB's own phrasings and vouched for by the
scorer. An operator adds turns from real calls (transcripts labelled in review) the same way.

Keys: ``text`` and ``label`` (an entry id of the knowledge base, or ``out_of_scope``), and
optionally ``lang`` (otherwise the entry's language, or detected from the text). Unknown keys,
unknown labels and empty or over-long text are import errors naming the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .kb_formats import LANGS, KbEntry, KbImportError, jsonl_objects, read_source
from .text import clean_query, detect_lang

__all__ = ["OUT_OF_SCOPE", "CallerTurn", "heard_as", "parse_callers", "read_callers"]

# The label of turns the knowledge base does not answer (also the intent examples' label).
OUT_OF_SCOPE = "out_of_scope"
_KEYS = ("text", "label", "lang")
# A caller's turn, not a document: longer lines are pasted by mistake.
MAX_CHARS = 500


@dataclass(frozen=True, slots=True)
class CallerTurn:
    """One labelled caller's turn."""

    text: str
    label: str
    """An entry id, or :data:`OUT_OF_SCOPE`."""
    lang: str
    source: str = ""
    """``file:line`` it was imported from."""

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, object]) -> CallerTurn:
        return cls(str(d["text"]), str(d["label"]), str(d["lang"]), str(d.get("source", "")))


def parse_callers(path: Path, text: str, entries: Iterable[KbEntry]) -> list[CallerTurn]:
    """Validate every line of a callers file against ``entries``; KbImportError at the first
    problem."""
    langs = {e.id: e.lang for e in entries}
    out: list[CallerTurn] = []
    for lineno, obj in jsonl_objects(path, text, _KEYS):
        for key in _KEYS:
            if key in obj and not isinstance(obj[key], str):
                raise KbImportError(path, lineno, f"{key!r} must be a string")
        turn, label = obj.get("text", "").strip(), obj.get("label", "")
        if not turn or len(turn) > MAX_CHARS:
            raise KbImportError(path, lineno, f"'text' must have 1 to {MAX_CHARS} characters")
        if label != OUT_OF_SCOPE and label not in langs:
            raise KbImportError(
                path, lineno, f"label {label!r} is neither an entry id nor {OUT_OF_SCOPE!r}"
            )
        lang = obj.get("lang") or langs.get(label) or detect_lang(turn)
        if lang not in LANGS:
            raise KbImportError(path, lineno, f"lang {lang!r} is not one of {LANGS}")
        out.append(CallerTurn(turn, label, lang, f"{path}:{lineno}"))
    return out


def read_callers(paths: Sequence[Path], entries: Sequence[KbEntry]) -> list[CallerTurn]:
    """Every turn of the callers files ``paths`` (see :func:`parse_callers`)."""
    out: list[CallerTurn] = []
    for path in paths:
        out.extend(parse_callers(path, read_source(path), entries))
    return out


def heard_as(turns: Iterable[CallerTurn]) -> list[str]:
    """The turns' texts as the dialog embeds a caller's turn: without fillers
    (:func:`.text.clean_query`)."""
    return [clean_query(c.text, c.lang) or c.text for c in turns]

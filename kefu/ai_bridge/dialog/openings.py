"""What the dialog's replies open with: worth having rendered before the first call.

A caller waits for the first sentence of an answer, never for the later ones (they render
while the first plays). The knowledge base's answers and the canned lines are known at
start, so their first sentences can be synthesized ahead into the voice's phrase cache
(:meth:`kefu.ai_bridge.speak.router.Voice.prerender_in_background`); a reply that starts
with one of them then starts without synthesis.
"""

from __future__ import annotations

from collections.abc import Iterable

from .kb import KbEntry
from .phrases import SAY
from .text import split_sentences

__all__ = ["reply_openings"]


def reply_openings(entries: Iterable[KbEntry]) -> dict[str, list[str]]:
    """Per language, the first sentence of every answer in ``entries`` and every canned line.

    Answers whose first sentence has a slot to fill (``{order_number}``), and canned lines
    with one (``{shop}``), differ per call and are left out; duplicates are listed once, in
    order.
    """
    lines: dict[str, dict[str, None]] = {}
    for entry in entries:
        first = split_sentences(entry.answer)[:1]
        if first and "{" not in first[0]:
            lines.setdefault(entry.lang, {})[first[0]] = None
    for (_, lang), line in SAY.items():  # spoken whole, as one sentence
        if "{" not in line:  # one that names something ({shop}) differs per call
            lines.setdefault(lang, {})[line] = None
    return {lang: list(found) for lang, found in lines.items()}

"""``python -m loadtest understanding-cv``: k-fold cross-validation over the labelled callers'
turns shipped with the KB (``kefu/ai_bridge/data/kb/*.callers.jsonl``).

The evaluation set (:mod:`loadtest.understanding`) has a dev split too small to choose a
threshold on once most of its errors are fixed (Mandarin dev has no sibling confusions left),
and its heldout split must never be tuned on. The callers' turns are ~2,250 labelled turns per
language, written by other hands in every caller style; here each is scored by a dialog stack
trained *without* it:

* the turns are split into ``--folds`` parts by a hash of their text (stable across runs);
* for each part, the manager is built as the server builds it (bundled KB, learned scorer,
  intent examples) but with the callers' turns of the other parts only, and every turn of the
  part is asked as the first turn of a fresh call, through the same code path and scoring as
  ``loadtest understanding`` (slot and "A or B?" follow-ups included);
* labels: an entry id, or ``out_of_scope`` (scored as ``none``); a plain hand-over is also
  right for the human-request and complaint entries, as in the evaluation set.

The figures are lower than the evaluation set's: the last round of turns was written to be
hard (misheard, rambling, dialect). They compare settings; they are not the product's accuracy.
The folds share their training sentences through the dialog's sentence-vector store in the
cache directory (:func:`kefu.ai_bridge.dialog.disk_cache.cached_vectors`), so a run embeds
each once (none on a warm cache) plus every asked turn, ~2 min on 2 cores; the latency columns
are left empty (`understanding` measures latency). ``choice_asked_pct`` is how often the
caller was asked "A or B?".
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest import understanding as U

_HANDOFF_RIGHT = ("-human-request", "-human-complaint")


def fold_of(text: str, folds: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % folds


def _item(turn: Any) -> dict[str, Any]:
    from kefu.ai_bridge.dialog.callers import OUT_OF_SCOPE

    item: dict[str, Any] = {
        "text": turn.text,
        "lang": turn.lang,
        "expect": U.NONE if turn.label == OUT_OF_SCOPE else turn.label,
        "split": "cv",
        "style": ["out_of_scope"] if turn.label == OUT_OF_SCOPE else ["plain"],
    }
    if turn.label.endswith(_HANDOFF_RIGHT):
        item["accept"] = ["human_agent"]
    return item


def run(langs: Sequence[str], folds: int, cache_dir: str | None = None) -> dict[str, Any]:
    """Score every callers' turn of ``langs`` with a stack trained without its fold."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from kefu.ai_bridge.dialog.e5 import E5Embedder
    from kefu.ai_bridge.dialog.intents import IntentClassifier
    from kefu.ai_bridge.dialog.kb import KnowledgeBase
    from kefu.ai_bridge.dialog.learned import LearnedScorer
    from kefu.ai_bridge.dialog.manager import DialogManager
    from kefu.ai_bridge.dialog.retrieval import HybridRetriever

    cache = U.ai_cache_dir(cache_dir)
    embedder = E5Embedder()
    if not embedder.ready:
        raise SystemExit(f"understanding-cv needs the e5 embedder: {embedder.error}")
    kb = KnowledgeBase.default(cache, embedder).with_vectors(embedder)
    results: list[dict[str, Any]] = []
    for f in range(folds):
        kept = [c for c in kb.callers if fold_of(c.text, folds) != f]
        asked = [c for c in kb.callers if fold_of(c.text, folds) == f and c.lang in langs]
        part = KnowledgeBase(kb.entries, kb.bm25, kb.vectors, kb.rows, kb.directory, kb.model, kept)
        intents = IntentClassifier(
            embedder, kb_entries=part.entries, callers=part.callers, cache_dir=cache
        )
        scorer = LearnedScorer.for_dialog(part, intents, cache_dir=cache)
        manager = DialogManager(HybridRetriever(part, embedder), intents, embedder, scorer=scorer)
        results += asyncio.run(U._ask(manager, [_item(c) for c in asked]))
    entries = U.kb_entries()
    groups = {}
    for lang in langs:
        g = U.summarize([r for r in results if r["lang"] == lang], entries, failures=False)
        # Latency means nothing here (vectors come from memory): `understanding` measures it.
        g["latency_ms"] = {"p50": "–", "p95": "–"}
        g["choice_asked_pct"] = U._pct(g["choice_asked"], g["items"])
        groups[f"{lang}/cv"] = g
    return {
        "command": "understanding-cv",
        "folds": folds,
        "turns": len(results),
        "cpus": os.cpu_count(),
        "groups": groups,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", choices=("en", "zh", "all"), default="all")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--cache-dir", help="KB index cache (default as `understanding`)")
    parser.add_argument("--json", dest="json_out", help="also write the full report here")


def main(args: argparse.Namespace) -> int:
    from kefu.mediaserver.logs import configure_logging

    configure_logging("warning", json=False)
    if args.folds < 2:
        raise SystemExit("--folds must be at least 2")
    langs = U.LANGS if args.lang == "all" else (args.lang,)
    summary = run(langs, args.folds, args.cache_dir)
    text = json.dumps(summary, indent=2, ensure_ascii=False, default=str)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    rows = "\n".join(U.row(k.split("/")[0], "cv", g) for k, g in summary["groups"].items())
    sys.stdout.write(text + "\n\n" + U.HEADER + "\n" + rows + "\n")
    return 0

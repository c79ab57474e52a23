"""Dialog costs: MiniLM embedding, hybrid retrieval, and respond() to the first sentence.

Run: python3 -m pytest loadtest/bench_dialog.py --benchmark-enable -p no:cacheprovider
Budget (docs): dialog answer chosen from the knowledge base <= 30 ms on 2 CPU cores.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from kefu.ai_bridge.dialog.embed import Embedder
from kefu.ai_bridge.dialog.intents import IntentClassifier
from kefu.ai_bridge.dialog.kb import KnowledgeBase
from kefu.ai_bridge.dialog.manager import DialogManager
from kefu.ai_bridge.dialog.retrieval import HybridRetriever
from kefu.ai_bridge.dialog.text import warm_up

EN = [
    "How long does delivery take to Chicago?",
    "I was charged twice for my order",
    "Can I pay with Apple Pay?",
    "What time do you open on Sunday?",
    "My headphones stopped working, is that covered?",
]
ZH = ["快递几天能到", "退款什么时候到账", "能用微信付款吗", "你们周末几点开门"]


@pytest.fixture(scope="module")
def parts(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Embedder, HybridRetriever, IntentClassifier]:
    cache = tmp_path_factory.mktemp("bench-dialog")
    warm_up()
    emb = Embedder()
    kb = KnowledgeBase.default(cache, emb)
    return (
        emb,
        HybridRetriever(kb, emb),
        IntentClassifier(emb, kb_entries=kb.entries, cache_dir=cache),
    )


def test_embed_one_sentence(benchmark, parts) -> None:  # type: ignore[no-untyped-def]
    emb = parts[0]
    texts = itertools.cycle(EN)
    benchmark(lambda: emb.embed_one(next(texts)))


def test_embed_batch_of_32_per_call(benchmark, parts) -> None:  # type: ignore[no-untyped-def]
    emb = parts[0]
    batch = (EN * 7)[:32]
    benchmark(lambda: emb.embed(batch))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_retrieval(benchmark, parts, lang: str) -> None:  # type: ignore[no-untyped-def]
    # English includes the query embedding; Chinese is BM25 + coverage only.
    retriever = parts[1]
    texts = itertools.cycle(EN if lang == "en" else ZH)
    benchmark(lambda: retriever.search(next(texts), lang=lang, k=5))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_respond_to_first_sentence(benchmark, parts, lang: str) -> None:  # type: ignore[no-untyped-def]
    emb, retriever, intents = parts
    manager = DialogManager(retriever, intents, emb)
    texts = itertools.cycle(EN if lang == "en" else ZH)
    loop = asyncio.new_event_loop()
    calls = itertools.count()

    async def turn() -> str:
        # A fresh call id per turn: every turn is a first question (no follow-up shortcuts).
        reply = await manager.respond(f"bench-{next(calls)}", next(texts))
        return await anext(reply.sentences)

    try:
        benchmark(lambda: loop.run_until_complete(turn()))
    finally:
        loop.close()


def test_cold_start_build(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Index the shipped KB and embed the intent examples from scratch (first start).
    counter = itertools.count()
    benchmark.pedantic(
        lambda: DialogManager.build(tmp_path / str(next(counter))), rounds=2, iterations=1
    )

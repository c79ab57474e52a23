"""Session-scoped dialog components: the model and the default KB load once per test run."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kefu.ai_bridge.dialog.embed import Embedder  # noqa: E402
from kefu.ai_bridge.dialog.intents import IntentClassifier  # noqa: E402
from kefu.ai_bridge.dialog.kb import KnowledgeBase  # noqa: E402
from kefu.ai_bridge.dialog.manager import DialogManager  # noqa: E402
from kefu.ai_bridge.dialog.retrieval import HybridRetriever  # noqa: E402
from kefu.ai_bridge.dialog.text import warm_up  # noqa: E402

HERE = Path(__file__).parent
# A Wednesday: relative dates in tests resolve against it.
TODAY = dt.date(2026, 12, 2)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    e = Embedder()
    assert e.ready, e.error
    return e


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dialog-cache")


@pytest.fixture(scope="session")
def default_kb(embedder: Embedder, cache_dir: Path) -> KnowledgeBase:
    warm_up()
    return KnowledgeBase.default(cache_dir, embedder)


@pytest.fixture(scope="session")
def classifier(embedder: Embedder, default_kb: KnowledgeBase, cache_dir: Path) -> IntentClassifier:
    return IntentClassifier(embedder, kb_entries=default_kb.entries, cache_dir=cache_dir)


@pytest.fixture(scope="session")
def retriever(default_kb: KnowledgeBase, embedder: Embedder) -> HybridRetriever:
    return HybridRetriever(default_kb, embedder)


@pytest.fixture
def manager(
    retriever: HybridRetriever, classifier: IntentClassifier, embedder: Embedder
) -> DialogManager:
    return DialogManager(retriever, classifier, embedder, today=lambda: TODAY)

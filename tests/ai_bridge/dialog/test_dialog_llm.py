"""The streaming LLM client against a local fake OpenAI-compatible server, and the splitter."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kefu.ai_bridge.dialog.kb import KbEntry
from kefu.ai_bridge.dialog.llm import LlmClient, LlmConfig, LlmError, build_messages
from kefu.ai_bridge.dialog.text import SentenceSplitter, split_sentences
from kefu.errors import RemoteError

MSGS = [{"role": "user", "content": "how long is delivery?"}]


async def collect(client: LlmClient) -> list[str]:
    return [s async for s in client.stream_sentences(MSGS)]


async def test_streams_sentences_as_tokens_arrive(llm_server: Any) -> None:
    async with llm_server() as fake:
        client = LlmClient(LlmConfig(fake.base_url, model="m", api_key="k"))
        try:
            assert await collect(client) == [
                "Standard delivery takes 3 to 5 days.",
                "Express is 1 to 2 days.",
            ]
        finally:
            await client.close()
        req = fake.requests[0]
        assert req["stream"] is True and req["model"] == "m" and req["messages"] == MSGS


async def test_server_down_is_llm_error(refused_url: str) -> None:
    client = LlmClient(LlmConfig(refused_url))
    try:
        with pytest.raises(LlmError) as info:
            await collect(client)
        assert isinstance(info.value, RemoteError)
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("mode", "message"),
    [("http500", "HTTP 500"), ("garbage", "non-JSON"), ("slow_first", "within budget")],
)
async def test_failures_raise_llm_error(llm_server: Any, mode: str, message: str) -> None:
    # slow_first holds the first token 30 s: giving up well before that is the client's
    # budget at work (a generous bound: a loaded CI box may lag by seconds, not by 20).
    async with llm_server(mode=mode, delay_s=30.0) as fake:
        client = LlmClient(LlmConfig(fake.base_url, first_token_timeout_s=0.2))
        t0 = time.monotonic()
        try:
            with pytest.raises(LlmError, match=message):
                await collect(client)
        finally:
            await client.close()
        assert time.monotonic() - t0 < 10


async def test_total_budget_applies_after_first_token(llm_server: Any) -> None:
    async with llm_server(mode="trickle", delay_s=30.0) as fake:
        client = LlmClient(LlmConfig(fake.base_url, first_token_timeout_s=0.5, total_timeout_s=0.3))
        try:
            with pytest.raises(LlmError, match="budget"):
                await collect(client)
        finally:
            await client.close()


async def test_cancellation_closes_the_stream(llm_server: Any) -> None:
    async with llm_server(mode="trickle", delay_s=5.0) as fake:
        client = LlmClient(LlmConfig(fake.base_url, first_token_timeout_s=1.0, total_timeout_s=10))
        task = asyncio.create_task(collect(client))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.close()


def test_grounded_prompt_contains_passages_and_refusal_rule() -> None:
    e = KbEntry("x", "How long is delivery?", "3 to 5 business days.", lang="en")
    msgs = build_messages("how fast do you ship", [e], "en")
    assert msgs[0]["role"] == "system" and "ONLY" in msgs[0]["content"]
    assert "3 to 5 business days." in msgs[0]["content"] and "NO_ANSWER" in msgs[0]["content"]
    assert msgs[1] == {"role": "user", "content": "how fast do you ship"}
    assert "只能根据" in build_messages("多久", [e], "zh")[0]["content"]


def test_prompt_shows_the_conversation_with_each_line_as_its_speakers() -> None:
    e = KbEntry("x", "How long is delivery?", "3 to 5 business days.", lang="en")
    history = [
        ("caller", "my parcel is late"),
        ("agent", "I have upgraded it to express shipping."),
        ("bot", "Anything else?"),
    ]
    system = build_messages("how fast is it now", [e], "en", history)[0]["content"]
    assert "3 to 5 business days." in system
    assert system.endswith(
        "Caller: my parcel is late\n"
        "Human agent: I have upgraded it to express shipping.\n"
        "You: Anything else?"
    )
    assert "Human agent" not in build_messages("how fast", [e], "en")[0]["content"]
    zh = build_messages("多久", [e], "zh", [("agent", "已为您加急。")])[0]["content"]
    assert zh.endswith("人工客服: 已为您加急。")


def test_splitter_waits_for_whitespace_after_a_period() -> None:
    sp = SentenceSplitter()
    assert sp.feed("It costs $12") == []
    assert sp.feed(".") == []
    assert sp.feed("50 today. Next") == ["It costs $12.50 today."]
    assert sp.feed(" one! And") == ["Next one!"]
    assert sp.flush() == ["And"]


def test_split_sentences_both_languages() -> None:
    assert split_sentences("Go to e.g. the app. Then pay.") == ["Go to e.g. the app.", "Then pay."]
    assert split_sentences("先申请退货。快递员会上门取件！好吗？") == [
        "先申请退货。",
        "快递员会上门取件！",
        "好吗？",
    ]

"""The LLM path of an answer: the model rephrases from the retrieved passages, sentence by
sentence; when it fails or misses its budget before its first sentence, the knowledge-base
answer is spoken instead, and a model that says it has no answer gets the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import replace

import structlog

from .llm import NO_ANSWER, LlmClient, LlmError, build_messages
from .phrases import say
from .plan import Plan, iterate

__all__ = ["llm_answer"]


async def llm_answer(
    llm: LlmClient,
    plan: Plan,
    history: tuple[tuple[str, str], ...],
    blog: structlog.typing.FilteringBoundLogger,
) -> tuple[Plan, AsyncIterator[str]]:
    """``plan`` as it stands after the model's first sentence, and the sentences to speak."""
    messages = build_messages(plan.query, plan.hits[:3], plan.lang, history)
    stream = llm.stream_sentences(messages)
    # The client enforces the first-token deadline; this outer guard also bounds the wait
    # for the first full sentence so a trickling server cannot stall the turn.
    guard = llm.config.first_token_timeout_s + 1.0
    try:
        first = await asyncio.wait_for(anext(stream), guard)
    except (LlmError, StopAsyncIteration, TimeoutError) as exc:
        await stream.aclose()
        blog.warning("dialog.llm_fallback", error=str(exc) or type(exc).__name__)
        return replace(plan, source="kb", hits=plan.hits[:1]), iterate(plan.sentences)
    except BaseException:
        await stream.aclose()
        raise
    if first.strip().startswith(NO_ANSWER):
        await stream.aclose()
        st = replace(plan.state, offered_handoff=True, last_query="", last_kb_ids=())
        return replace(plan, source="fallback", state=st, hits=[]), iterate(
            [say("fallback", plan.lang)]
        )
    return plan, _continue(first, stream, blog)


async def _continue(
    first: str, stream: AsyncGenerator[str, None], blog: structlog.typing.FilteringBoundLogger
) -> AsyncIterator[str]:
    try:
        yield first
        async for s in stream:
            yield s
    except LlmError as exc:
        # Sentences already spoken cannot be unsaid; end the answer where it broke.
        blog.warning("dialog.llm_broke_midway", error=str(exc))
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()

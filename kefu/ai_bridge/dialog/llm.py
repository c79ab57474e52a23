"""OpenAI-compatible streaming chat client that yields whole sentences.

POST ``{base_url}/v1/chat/completions`` with ``stream: true``; the reply is Server-Sent
Events (``data: {json}`` lines, ``data: [DONE]`` at the end). Tokens are cut into sentences as
they arrive so TTS can start speaking the first sentence while the rest is generated.

Budgets are deadlines, not per-read timeouts: the first token must arrive within
``first_token_timeout_s`` of the request (connect + queueing + prefill), the whole answer
within ``total_timeout_s``. Anything wrong on the server's side (refused connection, HTTP
error, unparseable SSE, missed deadline) raises LlmError so the caller can fall back to the
knowledge-base answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from kefu.errors import RemoteError

from .kb import KbEntry
from .text import SentenceSplitter

log = structlog.get_logger(__name__)

NO_ANSWER = "NO_ANSWER"


class LlmError(RemoteError):
    """The LLM endpoint failed, answered garbage, or missed its time budget."""


@dataclass(frozen=True, slots=True)
class LlmConfig:
    """Where the LLM is and how long we wait for it."""

    base_url: str
    """Server root, e.g. ``http://127.0.0.1:8000`` (``/v1/chat/completions`` is appended)."""
    model: str = "default"
    """Model name sent in the request."""
    api_key: str | None = None
    """Bearer token, if the server wants one."""
    first_token_timeout_s: float = 0.8
    """Deadline for the first content token, from the start of the request."""
    total_timeout_s: float = 10.0
    """Deadline for the whole answer."""
    max_tokens: int = 160
    """Cap on generated tokens (a spoken answer is 1–3 sentences)."""
    temperature: float = 0.2
    """Low: answers should restate the passages, not improvise."""


_SYSTEM = {
    "en": (
        "You are the voice assistant of a retail customer-service line. Answer the caller "
        "using ONLY the facts in the passages below. If the passages do not answer the "
        "question, reply with exactly {no}. Reply in English, in at most three short "
        "sentences suitable for speech: no lists, no markdown, no URLs."
    ),
    "zh": (
        "你是零售客服热线的语音助手。只能根据下面资料中的事实回答来电者。如果资料无法回答"
        "这个问题，只回复 {no}。用中文回答，最多三句简短的话，适合朗读：不要列表、不要"
        "markdown、不要网址。"
    ),
}


_HISTORY = {
    "en": (
        "Conversation so far (a human agent may have handled part of the call: the caller "
        "heard what they said, so do not contradict it):",
        {"caller": "Caller", "bot": "You", "agent": "Human agent"},
    ),
    "zh": (
        "此前的对话（人工客服可能接待过这通电话：来电者听到了人工客服说的话，不要与之矛盾）：",
        {"caller": "来电者", "bot": "你", "agent": "人工客服"},
    ),
}


def build_messages(
    question: str,
    passages: Sequence[KbEntry],
    lang: str = "en",
    history: Sequence[tuple[str, str]] = (),
) -> list[dict[str, str]]:
    """Grounded chat prompt: the passages are the only allowed source of facts.

    ``history`` is the conversation before ``question`` as ``(speaker, text)`` lines
    (:attr:`kefu.ai_bridge.dialog.state.DialogState.history`); each line is labelled with
    who said it, so a human agent's words read as theirs, not the assistant's.
    """
    system = _SYSTEM.get(lang, _SYSTEM["en"]).format(no=NO_ANSWER)
    ctx = "\n\n".join(
        f"[{i}] Q: {p.question}\nA: {p.answer}" for i, p in enumerate(passages, start=1)
    )
    content = f"{system}\n\nPassages:\n{ctx}"
    if history:
        intro, names = _HISTORY.get(lang, _HISTORY["en"])
        lines = "\n".join(f"{names.get(who, who)}: {text}" for who, text in history)
        content = f"{content}\n\n{intro}\n{lines}"
    return [
        {"role": "system", "content": content},
        {"role": "user", "content": question},
    ]


class LlmClient:
    """Streaming chat client. Pass a shared ``aiohttp.ClientSession`` or let it own one."""

    def __init__(self, config: LlmConfig, session: aiohttp.ClientSession | None = None) -> None:
        self.config = config
        self._session = session
        self._owns_session = session is None

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def stream_tokens(self, messages: list[dict[str, str]]) -> AsyncIterator[str]:
        """Content deltas as they arrive. Raises LlmError; cancellation closes the request."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + cfg.first_token_timeout_s
        final_deadline = start + cfg.total_timeout_s
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        body = {
            "model": cfg.model,
            "messages": messages,
            "stream": True,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        url = cfg.base_url.rstrip("/") + "/v1/chat/completions"

        async def before(aw: Any, what: str) -> Any:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise LlmError(f"LLM {what}: time budget exhausted")
            try:
                return await asyncio.wait_for(aw, remaining)
            except TimeoutError:
                raise LlmError(f"LLM {what}: no answer within budget") from None

        try:
            resp = await before(
                self._get_session().post(url, json=body, headers=headers), "request"
            )
        except aiohttp.ClientError as exc:
            raise LlmError(f"LLM request failed: {exc}") from exc
        async with resp:
            if resp.status != 200:
                text = (await resp.text())[:200] if resp.content else ""
                raise LlmError(f"LLM HTTP {resp.status}: {text}")
            got_token = False
            data_lines: list[str] = []
            while True:
                try:
                    raw = await before(resp.content.readline(), "stream")
                except aiohttp.ClientError as exc:
                    raise LlmError(f"LLM stream broke: {exc}") from exc
                if not raw:  # EOF without [DONE]: accept what we got, if anything
                    if not got_token:
                        raise LlmError("LLM stream ended without any content")
                    return
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if line.startswith("data:"):
                    data_lines.append(line[5:].lstrip(" "))
                    continue
                if line.startswith(":") or (line and ":" in line.split(" ", 1)[0]):
                    continue  # SSE comment or other field (event:, id:, retry:)
                if line:
                    raise LlmError(f"LLM stream is not SSE: {line[:80]!r}")
                if not data_lines:
                    continue
                data = "\n".join(data_lines)
                data_lines = []
                if data == "[DONE]":
                    if not got_token:
                        raise LlmError("LLM stream ended without any content")
                    return
                delta = _parse_chunk(data)
                if delta:
                    if not got_token:
                        got_token = True
                        deadline = final_deadline
                        log.debug("llm.first_token", ms=round((loop.time() - start) * 1000))
                    yield delta

    async def stream_sentences(self, messages: list[dict[str, str]]) -> AsyncGenerator[str, None]:
        """Sentences of the answer, each yielded as soon as it is complete."""
        splitter = SentenceSplitter()
        async for delta in self.stream_tokens(messages):
            for sentence in splitter.feed(delta):
                yield sentence
        for sentence in splitter.flush():
            yield sentence


def _parse_chunk(data: str) -> str:
    try:
        obj = json.loads(data)
    except json.JSONDecodeError:
        raise LlmError(f"LLM sent non-JSON event: {data[:80]!r}") from None
    if not isinstance(obj, dict):
        raise LlmError("LLM event is not a JSON object")
    if "error" in obj:
        raise LlmError(f"LLM error event: {str(obj['error'])[:200]}")
    choices = obj.get("choices")
    if not isinstance(choices, list):
        raise LlmError("LLM event has no 'choices' list")
    if not choices:
        return ""  # usage-only chunk
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    if not isinstance(delta, dict):
        raise LlmError("LLM event choice has no 'delta' object")
    content = delta.get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise LlmError("LLM delta content is not a string")
    return content

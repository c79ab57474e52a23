"""A local OpenAI-compatible chat server on 127.0.0.1 that streams tokens (test double)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class FakeLlm:
    """``mode`` picks the behaviour: ok, slow_first, garbage, http500, no_answer, break_mid,
    trickle (tokens arrive but never complete a sentence in time)."""

    mode: str = "ok"
    tokens: list[str] = field(
        default_factory=lambda: ["Standard ", "delivery ", "takes 3", " to 5 days.", " Express", " is 1", " to 2 days."]
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
            if self.mode == "break_mid" and i == 4:
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

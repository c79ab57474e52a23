"""Waiting on a condition that another process holds (Redis, a kefu node, a proxy)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable


async def until(check: Callable[[], Awaitable[bool] | bool], within: float = 10.0) -> None:
    """Wait for a condition held by another process (Redis, a node): there is nothing to
    await but the next look, so look every 20 ms until ``within`` seconds are up."""
    async with asyncio.timeout(within):
        while True:
            answer = check()
            if inspect.isawaitable(answer):
                answer = await answer
            if answer:
                return
            await asyncio.sleep(0.02)

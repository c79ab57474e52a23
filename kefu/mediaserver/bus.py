"""The in-process event bus: every call event goes here; the workbench, logs and metrics read it.

Subscribers get a bounded queue each. A slow subscriber loses its oldest events (counted in
``dropped``) rather than slowing the calls down. Redis pub/sub can stand behind the same API.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class Subscription:
    queue: asyncio.Queue[object]
    dropped: int = 0

    def deliver(self, event: object) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(event)

    async def __aiter__(self) -> AsyncIterator[object]:
        while True:
            yield await self.queue.get()


@dataclass(eq=False)
class EventBus:
    queue_size: int = 256
    _subscribers: set[Subscription] = field(default_factory=set)

    def subscribe(self) -> Subscription:
        sub = Subscription(asyncio.Queue(self.queue_size))
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    def publish(self, event: object) -> None:
        for sub in self._subscribers:
            sub.deliver(event)

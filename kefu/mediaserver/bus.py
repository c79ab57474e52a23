"""The in-process event bus: every call event goes here; the workbench, logs and metrics read it.

Subscribers get a bounded queue each. A slow subscriber loses its oldest events (counted in
``dropped``) rather than slowing the calls down. Redis pub/sub can stand behind the same API.
Events are frozen dataclasses (kefu.mediaserver.events); ``event_json`` writes them as JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class Subscription:
    queue: asyncio.Queue[object]
    dropped: int = 0
    """Events thrown away (oldest first) because the queue was full, in all."""
    accept: Callable[[object], bool] | None = None
    """Only events this returns True for are queued (None: all)."""
    _reported: int = 0

    def deliver(self, event: object) -> None:
        if self.accept is not None and not self.accept(event):
            return
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
        self.queue.put_nowait(event)

    def take_dropped(self) -> int:
        """Events dropped since the last call (a reader tells its client how many it lost).

        Every one of them is older than anything still in the queue.
        """
        new = self.dropped - self._reported
        self._reported = self.dropped
        return new

    async def __aiter__(self) -> AsyncIterator[object]:
        while True:
            yield await self.queue.get()


@dataclass(eq=False)
class EventBus:
    queue_size: int = 256
    _subscribers: set[Subscription] = field(default_factory=set)

    def subscribe(
        self, accept: Callable[[object], bool] | None = None, *, queue_size: int | None = None
    ) -> Subscription:
        """A new subscription; ``accept`` filters what is queued, ``queue_size`` bounds it."""
        sub = Subscription(asyncio.Queue(queue_size or self.queue_size), accept=accept)
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: object) -> None:
        for sub in self._subscribers:
            sub.deliver(event)

"""The in-process event bus: every call event goes here; the workbench, logs and metrics read it.

Two kinds of reader:

* **subscriptions** (``/api/events`` sockets, a room's data channel): a bounded queue each. A
  slow subscriber loses its oldest events (counted in ``dropped``) rather than slowing the
  calls down;
* **sinks** (the interaction log, the Prometheus metrics): called inline for every event, in
  the order attached, and never lose one. A sink must be quick and never block (the
  interaction log buffers and writes on a thread); one that raises is logged and stays
  attached, and the other readers still get the event.

Redis pub/sub can stand behind the same API. Events are frozen dataclasses
(kefu.mediaserver.events); ``event_json`` writes them as JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)


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
    _sinks: list[Callable[[object], None]] = field(default_factory=list)

    def subscribe(
        self, accept: Callable[[object], bool] | None = None, *, queue_size: int | None = None
    ) -> Subscription:
        """A new subscription; ``accept`` filters what is queued, ``queue_size`` bounds it."""
        sub = Subscription(asyncio.Queue(queue_size or self.queue_size), accept=accept)
        self._subscribers.add(sub)
        return sub

    def attach(self, sink: Callable[[object], None]) -> None:
        """Call ``sink`` with every event from now on (see the module's doc for the rules)."""
        self._sinks.append(sink)

    def detach(self, sink: Callable[[object], None]) -> None:
        if sink in self._sinks:
            self._sinks.remove(sink)

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def publish(self, event: object) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # a reader's bug must not reach the call that published
                log.exception("bus_sink_failed", sink=getattr(sink, "__qualname__", repr(sink)))
        for sub in self._subscribers:
            sub.deliver(event)

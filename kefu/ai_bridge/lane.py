"""An ordered lane from one producer to one consumer that never drops control items.

Every hand-off between the AI stages of a call that is not a plain ``await`` goes through a
:class:`Lane`: the listener's events (speech started, end of turn, final transcript, and the
droppable partial transcripts) and the audio for the partial recognizer (droppable chunks and
the end-of-turn markers that reset it).

Invariants:

* items come out in the order they went in; nothing is ever re-queued behind later items;
* an item ``is_control`` says is a control item and is never dropped: the lane grows for it.
  Control items are a few per caller turn (a turn lasts at least ``min_speech_ms``), so the
  lane stays small while its consumer is alive; ``high_water`` records how long it got;
* other items are data: at most ``max_data`` of them wait at a time; one more drops the
  *oldest* waiting data item (counted in ``dropped``), never a control item;
* ``put`` never blocks and never raises on a full lane: the producer runs on the event loop,
  inside the audio path.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Lane"]

T = TypeVar("T")


class Lane(Generic[T]):
    """FIFO with control items that are never dropped and a bound on data items."""

    def __init__(self, max_data: int, *, is_control: Callable[[T], bool]) -> None:
        if max_data < 1:
            raise ValueError("max_data must be at least 1")
        self.max_data = max_data
        self.is_control = is_control
        self.dropped = 0
        """Data items dropped because ``max_data`` were already waiting."""
        self.high_water = 0
        """Most items ever waiting at once."""
        self._items: deque[T] = deque()
        self._data = 0
        self._ready = asyncio.Event()

    # -- producer ---------------------------------------------------------------------------

    def put(self, item: T) -> bool:
        """Append ``item``; False when it was data and the oldest data item made room."""
        made_room = True
        if not self.is_control(item):
            if self._data >= self.max_data:
                self._drop_oldest_data()
                made_room = False
            self._data += 1
        self._items.append(item)
        if len(self._items) > self.high_water:
            self.high_water = len(self._items)
        self._ready.set()
        return made_room

    def _drop_oldest_data(self) -> None:
        for i, queued in enumerate(self._items):
            if not self.is_control(queued):
                del self._items[i]
                self._data -= 1
                self.dropped += 1
                return

    # -- consumer ---------------------------------------------------------------------------

    def get_nowait(self) -> T:
        """The oldest item; ``asyncio.QueueEmpty`` when there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.popleft()
        if not self.is_control(item):
            self._data -= 1
        return item

    async def get(self) -> T:
        """Wait for the oldest item."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        return self.get_nowait()

    def peek(self) -> T | None:
        """The oldest item without taking it (None when empty)."""
        return self._items[0] if self._items else None

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        """The waiting items, oldest first (a snapshot for tests and logs)."""
        return iter(list(self._items))

    def clear(self) -> None:
        self._items.clear()
        self._data = 0

"""The event bus across nodes, on one Redis Stream (``kefu:events``).

Every event published on this node's bus (its own calls', and its room workers') is written
to the stream as its JSON form (:func:`~kefu.mediaserver.events.event_json`) plus the node's
id; every event another node wrote is read back and published here as a
:class:`~kefu.mediaserver.events.RelayedEvent`, so ``/api/events`` and the workbench on any
node see every node's calls. Sinks (metrics, the interaction log) skip relayed events: the
node hosting a call counts it.

Writing never blocks a call: the bus sink only appends to a bounded buffer
(``state.buffer_events``; the oldest are dropped beyond, and counted) that a writer task sends
in pipelined batches. While Redis is lost the buffer fills, and when it returns the writer
sends what is left and the reader carries on from the last entry it read, so a reader on
another node misses only what overflowed. The stream is trimmed to about
:data:`STREAM_LENGTH` entries.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

import structlog
from redis.exceptions import ResponseError

from kefu.cluster.redis_link import REDIS_ERRORS, RedisLink, close_client
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import RelayedEvent, event_json

__all__ = ["EventsBridge", "STREAM"]

log = structlog.get_logger("kefu.cluster")

STREAM = "kefu:events"
STREAM_LENGTH = 20_000
BATCH = 200
BLOCK_MS = 1000


class EventsBridge:
    def __init__(self, link: RedisLink, bus: EventBus, node_id: str, *, buffer: int) -> None:
        self.link = link
        self.bus = bus
        self.node_id = node_id
        self._pending: deque[str] = deque(maxlen=max(1, buffer))
        self._wake = asyncio.Event()
        self._reader_client: Any = link.make_client(timeout_s=BLOCK_MS / 1000 + 2.0)
        self.sent = 0
        self.received = 0
        self.dropped = 0
        """Events lost because the buffer overflowed while Redis was away."""
        self.last_id = "$"

    def read(self, event: object) -> None:
        """The bus sink: queue this node's event for the stream (never blocks)."""
        if isinstance(event, RelayedEvent) and event.node:
            return  # another node's: it wrote it itself
        try:
            body = event_json(event)
        except KeyError:
            return  # a class the bus does not put on the wire
        body["node"] = self.node_id
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(json.dumps(body, separators=(",", ":"), default=str))
        self._wake.set()

    async def run_writer(self) -> None:
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            batch = [self._pending[i] for i in range(min(BATCH, len(self._pending)))]
            try:
                async with self.link.client.pipeline(transaction=False) as pipe:
                    for text in batch:
                        pipe.xadd(
                            STREAM,
                            {"n": self.node_id, "e": text},
                            maxlen=STREAM_LENGTH,
                            approximate=True,
                        )
                    await pipe.execute()
            except REDIS_ERRORS as exc:
                self.link.failed(exc)
                await self.link.wait_up()
                continue
            for _ in batch:
                self._pending.popleft()
            self.sent += len(batch)

    async def start_reading(self) -> None:
        """Note where the stream ends now: the reader starts from here (call before serving)."""
        try:
            info = await self._reader_client.xinfo_stream(STREAM)
        except ResponseError:
            self.last_id = "0-0"  # no stream yet: read it from its first entry
        except REDIS_ERRORS as exc:
            self.link.failed(exc)
        else:
            self.last_id = str(info.get("last-generated-id") or "0-0")

    async def run_reader(self) -> None:
        while True:
            try:
                answer = await self._reader_client.xread(
                    {STREAM: self.last_id}, count=BATCH, block=BLOCK_MS
                )
            except REDIS_ERRORS as exc:
                self.link.failed(exc)
                await self.link.wait_up()
                continue
            for _stream, entries in answer or ():
                for entry_id, fields in entries:
                    self.last_id = entry_id
                    self._deliver(fields)

    def _deliver(self, fields: dict[str, str]) -> None:
        node = fields.get("n", "")
        if not node or node == self.node_id:
            return
        try:
            body = json.loads(fields.get("e", ""))
            call_id, at = body["call_id"], float(body["at"])
        except (ValueError, KeyError, TypeError):
            log.warning("cluster.event_malformed", node=node)
            return
        if not isinstance(call_id, str) or not isinstance(body, dict):
            return
        self.received += 1
        self.bus.publish(RelayedEvent(call_id, at, body, node=node))

    def describe(self) -> dict[str, int]:
        return {
            "sent": self.sent,
            "received": self.received,
            "buffered": len(self._pending),
            "dropped": self.dropped,
        }

    async def close(self) -> None:
        await close_client(self._reader_client)

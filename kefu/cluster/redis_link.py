"""One node's connection to Redis (``state.redis_url``) and whether it is up.

Everything in :mod:`kefu.cluster` talks to Redis through a :class:`RedisLink`: it builds the
``redis.asyncio`` clients with short timeouts (a Redis that stops answering is noticed in
seconds), and keeps one view of the link's health that ``/readyz`` reports (``degraded``
while Redis is lost) and the writers use to buffer instead of failing. A watchdog asks Redis
for its run id every ``interval_s``: it flips the state back when Redis returns, and counts a
restart it did not see fail (the client reconnects by itself) as an outage too, so the node
writes back what an empty Redis lost; :meth:`failed` lets any user report an error as it
happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from kefu.errors import StateUnavailable

__all__ = ["REDIS_ERRORS", "RedisLink", "close_client", "redacted", "stop_tasks"]

log = structlog.get_logger("kefu.cluster")

REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, asyncio.TimeoutError)
"""What a Redis call raises when Redis is lost (a refused or reset connection, a timeout)."""

OP_TIMEOUT_S = 3.0
"""Socket timeout of ordinary commands: one stalled this long counts as Redis lost. No turn
waits on Redis, except a call's first on this node (its state is read once)."""


CLOSE_TIMEOUT_S = 2.0
"""How long closing a client may take: a connection left mid-command by a cancelled task
must not hold a node's shutdown."""


async def close_client(client: Any) -> None:
    """Close a ``redis.asyncio`` client, giving up after :data:`CLOSE_TIMEOUT_S`."""
    with contextlib.suppress(TimeoutError, *REDIS_ERRORS):
        await asyncio.wait_for(client.aclose(), CLOSE_TIMEOUT_S)


async def stop_tasks(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them, at most :data:`CLOSE_TIMEOUT_S`."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S)


def redacted(url: str) -> str:
    """``url`` without its password (for logs and errors)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class RedisLink:
    """The clients of one Redis and its health, shared by the node's cluster parts."""

    def __init__(self, url: str, *, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.client: Any = self.make_client()
        self.up = False
        self.since = time.monotonic()
        self.last_error = ""
        self.outages = 0
        self.run_id = ""
        self._returned = asyncio.Event()

    def make_client(self, *, timeout_s: float = OP_TIMEOUT_S) -> Any:
        """A client of this Redis (``timeout_s``: a blocking read needs more than the default)."""
        return aioredis.from_url(
            self.url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=OP_TIMEOUT_S,
            health_check_interval=0,
        )

    async def _run_id(self) -> str:
        """The Redis server's run id: a new one means Redis restarted (and may be empty)."""
        info = await self.client.info("server")
        return str(info.get("run_id", ""))

    async def connect(self, *, required: bool) -> None:
        """Ping once; raises StateUnavailable when ``required`` and Redis does not answer."""
        try:
            self.run_id = await self._run_id()
        except REDIS_ERRORS as exc:
            self.failed(exc)
            if required:
                raise StateUnavailable(redacted(self.url), str(exc) or type(exc).__name__) from exc
            log.warning("cluster.redis_degraded_start", url=redacted(self.url), error=str(exc))
            return
        self._set_up()

    def failed(self, exc: BaseException) -> None:
        """A command failed: Redis counts as lost until the watchdog's next good ping."""
        self.last_error = str(exc) or type(exc).__name__
        if self.up or self.outages == 0:
            self.outages += 1
            self.since = time.monotonic()
            log.warning("cluster.redis_lost", url=redacted(self.url), error=self.last_error)
        self.up = False
        self._returned.clear()

    def _set_up(self) -> None:
        if not self.up:
            if self.outages:
                log.info(
                    "cluster.redis_back",
                    url=redacted(self.url),
                    down_s=round(time.monotonic() - self.since, 1),
                )
            self.up = True
            self.since = time.monotonic()
            self._returned.set()

    async def wait_up(self) -> None:
        await self._returned.wait()

    async def watch(self) -> None:
        """Ping while the node runs: notice Redis coming back (and going away when idle)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                run_id = await self._run_id()
            except REDIS_ERRORS as exc:
                self.failed(exc)
                continue
            if self.run_id and run_id != self.run_id:
                # Restarted between two looks (the client reconnected on its own): an outage
                # all the same, whatever was written before is gone.
                self.failed(ConnectionError("Redis restarted"))
            self.run_id = run_id
            self._set_up()

    def describe(self) -> dict[str, Any]:
        return {
            "url": redacted(self.url),
            "up": self.up,
            "for_s": round(time.monotonic() - self.since, 1),
            "outages": self.outages,
            **({"error": self.last_error} if not self.up and self.last_error else {}),
        }

    async def close(self) -> None:
        await close_client(self.client)

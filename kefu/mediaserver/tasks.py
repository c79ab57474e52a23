"""Tasks the server owns (not a call's: those are :meth:`kefu.mediaserver.call.Call.spawn`)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

log = structlog.get_logger("kefu.server")


class ServerTasks:
    """Named background tasks; one that fails is logged, all are cancelled at stop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        """Forget a finished task; one that failed is logged (never lost with the task)."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("task_failed", task=task.get_name(), exc_info=exc)

    async def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

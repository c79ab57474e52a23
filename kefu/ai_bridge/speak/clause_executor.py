"""The worker thread of a voice engine, with answers' first clauses served first.

Every call shares its engine's one synthesis thread. With a plain FIFO executor, the first
clause of a new answer (what the caller is waiting for: kefu's first audio) queues behind the
later clauses of other calls' long answers, which are only needed once the clause before
them has played. :class:`ClauseExecutor` runs jobs marked :data:`FIRST` (see
:func:`first_clause`) before every other queued job, in submission order within each class.
Later clauses cannot starve: an answer has one first clause, and it is short. Jobs marked
:data:`BACKGROUND` (:func:`background`: phrases rendered ahead into the cache) run only when
nothing else waits and no answer began (a :data:`FIRST` job) for BACKGROUND_QUIET_S: a call
that is talking keeps the cores for itself (its speech, the avatar's video), and the warm-up
resumes in a lull.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BACKGROUND", "FIRST", "LATER", "ClauseExecutor", "background", "first_clause"]

FIRST = 0
LATER = 1
BACKGROUND = 2
BACKGROUND_QUIET_S = 5.0
"""Seconds without a new answer's first clause before background work runs (a bot that talks
starts a sentence every few seconds)."""
_PRIORITY = "clause_priority"

T = TypeVar("T")


def first_clause(job: Callable[[], T]) -> Callable[[], T]:
    """Mark ``job`` (a ``functools.partial``) as an answer's first clause."""
    setattr(job, _PRIORITY, FIRST)
    return job


def background(job: Callable[[], T]) -> Callable[[], T]:
    """Mark ``job`` as work nobody waits for (a cache warm-up): it yields to every other."""
    setattr(job, _PRIORITY, BACKGROUND)
    return job


class ClauseExecutor(concurrent.futures.Executor):
    """One worker thread; jobs marked :data:`FIRST` go before the others queued."""

    def __init__(self, name: str, *, quiet_s: float = BACKGROUND_QUIET_S) -> None:
        self._queue: list[tuple[int, int, concurrent.futures.Future[Any], Callable[[], Any]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False
        self._quiet_s = quiet_s
        self._live_at = -math.inf
        """When the last answer's first clause was submitted (time.monotonic)."""
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        priority = getattr(fn, _PRIORITY, LATER)
        with self._ready:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            job = (lambda: fn(*args, **kwargs)) if args or kwargs else fn
            heapq.heappush(self._queue, (priority, next(self._order), future, job))
            if priority == FIRST:  # a call is being answered (a load or a warm-up is not)
                self._live_at = time.monotonic()
            self._ready.notify()
        return future

    def hold_background(self) -> None:
        """A call is being answered (from the cache, too): background work waits for a lull."""
        with self._ready:
            self._live_at = time.monotonic()

    def queued(self) -> int:
        with self._ready:
            return len(self._queue)

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._closed:
                    if not self._queue:
                        self._ready.wait()
                        continue
                    quiet = time.monotonic() - self._live_at
                    if self._queue[0][0] != BACKGROUND or quiet >= self._quiet_s:
                        break
                    self._ready.wait(self._quiet_s - quiet)  # a live job wakes it at once
                if not self._queue:
                    return
                _, _, future, job = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while it waited (barge-in)
            try:
                result = job()
            except BaseException as exc:  # handed to the awaiting side, as a thread pool does
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._closed = True
            if cancel_futures:
                for _, _, future, _ in self._queue:
                    future.cancel()
                self._queue.clear()
            self._ready.notify_all()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

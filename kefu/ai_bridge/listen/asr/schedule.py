"""The order local ASR decodes run in: a caller waiting for an answer goes first.

A local model decodes one utterance at a time on one worker thread (two would share the same
cores and both be slow). Every call sends it two kinds of work: **speculative** decodes of
audio that may turn out to be the whole utterance (started when the caller pauses, to have the
transcript ready at the end of turn) and **urgent** ones: the decode a turn ended on, which
the caller is now waiting for. With a first-in-first-out queue, one call's urgent decode
waited behind every other call's speculative ones — the reason 16 concurrent calls missed their
latency target while 12 met it. Here:

* urgent decodes run before speculative ones, each kind in arrival order;
* a speculative decode the turn then ended on is *promoted* (:meth:`DecodeTicket.promote`):
  from then on it is urgent, keeping its place among the urgent ones by when it was queued;
* a decode cancelled before it started (the caller spoke on, so the speculative audio is
  stale) is dropped without running;
* each call has at most one speculative decode queued (the listener cancels the previous one
  before it asks for the next), so speculative work is bounded by the number of calls.

:class:`DecodeQueue` is the worker thread; :func:`next_decode` is its choice, pure.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DecodeQueue", "DecodeStats", "DecodeTicket", "next_decode"]


@dataclass(eq=False)
class DecodeTicket:
    """How urgent one decode is (see the module's doc)."""

    urgent: bool = False

    def promote(self) -> None:
        """The turn ended on this decode's audio: a caller now waits for it."""
        self.urgent = True


@dataclass(eq=False)
class _Job:
    seq: int
    ticket: DecodeTicket
    future: Future[Any]
    run: Callable[[], Any]


def next_decode(jobs: Sequence[_Job]) -> int:
    """Index of the job to run next: the oldest urgent one, else the oldest speculative one."""
    return min(range(len(jobs)), key=lambda i: (not jobs[i].ticket.urgent, jobs[i].seq))


@dataclass
class DecodeStats:
    urgent: int = 0
    """Decodes run while urgent (turn ends, including promoted speculative ones)."""
    speculative: int = 0
    """Speculative decodes run."""
    dropped: int = 0
    """Decodes cancelled before they started, never run."""
    queued_max: int = 0
    """The most decodes ever waiting at once."""


@dataclass(eq=False)
class DecodeQueue:
    """One worker thread running decodes in :func:`next_decode` order."""

    name: str = "asr"
    stats: DecodeStats = field(default_factory=DecodeStats)
    _jobs: list[_Job] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    _thread: threading.Thread | None = None

    def submit(self, run: Callable[[], Any], ticket: DecodeTicket | None = None) -> Future[Any]:
        """Queue ``run`` (called on the worker thread); its result or exception lands in the
        returned future. Cancel the future to drop a decode that has not started."""
        future: Future[Any] = Future()
        with self._cond:
            if self._closed:
                future.cancel()
                return future
            job = _Job(next(self._seq), ticket or DecodeTicket(urgent=True), future, run)
            self._jobs.append(job)
            self.stats.queued_max = max(self.stats.queued_max, len(self._jobs))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def close(self) -> None:
        """Stop the worker after the decode in progress; queued ones are cancelled."""
        with self._cond:
            self._closed = True
            jobs, self._jobs = self._jobs, []
            self._cond.notify_all()
        for job in jobs:
            job.future.cancel()

    def _take(self) -> _Job | None:
        with self._cond:
            while True:
                if self._closed:
                    return None
                if self._jobs:
                    job = self._jobs.pop(next_decode(self._jobs))
                    if job.future.set_running_or_notify_cancel():
                        return job
                    self.stats.dropped += 1
                    continue
                self._cond.wait()

    def _work(self) -> None:
        while (job := self._take()) is not None:
            if job.ticket.urgent:
                self.stats.urgent += 1
            else:
                self.stats.speculative += 1
            try:
                result = job.run()
            except BaseException as exc:  # delivered to whoever awaits the decode
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)

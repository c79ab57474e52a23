"""The ASR decode order: a caller waiting for an answer goes before other calls' speculation.
Decodes here are functions that record their name; the worker is held on a first decode
while the queue fills, so the order is decided by the queue alone (no clocks)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import CancelledError

import pytest

from kefu.ai_bridge.listen.asr.schedule import DecodeQueue, DecodeTicket


def held_queue() -> tuple[DecodeQueue, threading.Event, list[str]]:
    """A queue whose worker is busy with a first decode until the event is set."""
    queue = DecodeQueue("test-asr")
    ran: list[str] = []
    release = threading.Event()
    started = threading.Event()

    def first() -> str:
        started.set()
        release.wait(10)
        ran.append("first")
        return "first"

    queue.submit(first)
    assert started.wait(10)
    return queue, release, ran


def job(ran: list[str], name: str):  # noqa: ANN201
    return lambda: ran.append(name) or name


def test_turn_ends_go_before_speculation_and_promoted_ones_join_them() -> None:
    queue, release, ran = held_queue()
    futures = [
        queue.submit(job(ran, "spec-a"), DecodeTicket()),
        queue.submit(job(ran, "spec-b"), DecodeTicket()),
        queue.submit(job(ran, "final-c"), DecodeTicket(urgent=True)),
    ]
    ticket_d = DecodeTicket()
    futures.append(queue.submit(job(ran, "spec-d"), ticket_d))
    futures.append(queue.submit(job(ran, "final-e")))  # no ticket: urgent
    ticket_d.promote()  # d's turn ended on its audio: urgent, queued before e
    assert queue.pending() == 5
    release.set()
    assert [f.result(10) for f in futures] == ["spec-a", "spec-b", "final-c", "spec-d", "final-e"]
    assert ran == ["first", "final-c", "spec-d", "final-e", "spec-a", "spec-b"]
    assert (queue.stats.urgent, queue.stats.speculative) == (4, 2)
    assert queue.stats.queued_max == 5
    queue.close()


def test_stale_speculation_is_dropped_without_running_and_errors_reach_the_caller() -> None:
    queue, release, ran = held_queue()
    stale = queue.submit(job(ran, "stale"), DecodeTicket())
    assert stale.cancel()  # the caller spoke on before it started

    def broken() -> None:
        raise RuntimeError("model exploded")

    failing = queue.submit(broken)
    kept = queue.submit(job(ran, "kept"), DecodeTicket())
    release.set()
    assert kept.result(10) == "kept"
    with pytest.raises(RuntimeError, match="model exploded"):
        failing.result(10)
    assert ran == ["first", "kept"] and queue.stats.dropped == 1
    queue.close()


def test_close_cancels_what_waits_and_refuses_more() -> None:
    queue, release, ran = held_queue()
    waiting = queue.submit(job(ran, "late"), DecodeTicket())
    queue.close()
    release.set()
    with pytest.raises(CancelledError):
        waiting.result(10)
    assert queue.submit(job(ran, "after")).cancelled()
    assert "late" not in ran and "after" not in ran


async def test_cancelling_the_awaiting_task_drops_the_queued_decode() -> None:
    queue, release, ran = held_queue()
    task = asyncio.ensure_future(asyncio.wrap_future(queue.submit(job(ran, "x"), DecodeTicket())))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    after = queue.submit(job(ran, "y"))
    release.set()
    assert await asyncio.wrap_future(after) == "y"
    assert ran == ["first", "y"] and queue.stats.dropped == 1
    queue.close()

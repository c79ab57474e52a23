"""Calls waiting for an agent: queued only when someone can come, in order, with a limit."""

from __future__ import annotations

import asyncio
import time

import structlog

from kefu.mediaserver.agent_queue import AgentQueue
from kefu.mediaserver.events import AgentWait, CallEnded, CallStateChanged


class FakeCall:
    def __init__(self, call_id: str) -> None:
        self.id = call_id
        self.log = structlog.get_logger("test").bind(call_id=call_id)


def queue(agents: int, wait_s: float = 30.0) -> tuple[AgentQueue, list[object], list[str]]:
    published: list[object] = []
    fell_back: list[str] = []
    q = AgentQueue(
        published.append,
        agents_online=lambda: agents,
        wait_s=wait_s,
        fallback=lambda call: fell_back.append(call.id),
    )
    return q, published, fell_back


async def test_with_nobody_signed_in_the_fallback_runs_at_once() -> None:
    q, published, fell_back = queue(agents=0)
    q.request(FakeCall("c1"), "caller asked")  # type: ignore[arg-type]
    assert fell_back == ["c1"] and published == [] and q.since("c1") is None


async def test_calls_wait_in_arrival_order_and_a_takeover_ends_the_wait() -> None:
    q, published, fell_back = queue(agents=2)
    for n in (1, 2, 3):
        q.request(FakeCall(f"c{n}"), "caller asked")  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
    q.request(FakeCall("c2"), "caller asked")  # type: ignore[arg-type]  # asked twice: one wait
    assert q.order() == ["c1", "c2", "c3"] and fell_back == []
    waits = [e for e in published if isinstance(e, AgentWait)]
    assert [(e.call_id, e.waiting, e.position) for e in waits] == [
        ("c1", True, 1),
        ("c2", True, 2),
        ("c3", True, 3),
    ]
    q.read(CallStateChanged("c2", time.time(), "ai_active", "human_active", "taken over by ann"))
    q.read(CallEnded("c3", time.time(), "bye", True))
    q.read(CallStateChanged("c1", time.time(), "ai_active", "transferring", "REFER"))
    assert q.order() == ["c1"]
    ends = [(e.call_id, e.outcome) for e in published if isinstance(e, AgentWait) and not e.waiting]
    assert ends == [("c2", "taken"), ("c3", "ended")]
    q.close()


async def test_the_wait_limit_runs_the_fallback_once() -> None:
    q, published, fell_back = queue(agents=1, wait_s=0.05)
    q.request(FakeCall("c1"), "ai error")  # type: ignore[arg-type]
    assert q.since("c1") is not None
    await asyncio.sleep(0.15)
    assert fell_back == ["c1"] and q.order() == []
    last = published[-1]
    assert isinstance(last, AgentWait) and (last.waiting, last.outcome) == (False, "timeout")
    q.read(CallEnded("c1", time.time(), "bye", True))  # nothing left to end
    assert len(published) == 2

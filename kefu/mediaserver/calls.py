"""The call lifecycle: every live call, and the one place a call is torn down.

Calls are kept by their SIP leg handle. Whatever ends a call (BYE, CANCEL, a timer, a
transfer, the API, a rejection, shutdown) ends it through :meth:`CallLifecycle.end`, which
releases everything the call owns (its tasks, its agent, its room seat, its RTP ports, each
step logged if it fails and never stopping the others), counts it in the metrics and
publishes :class:`~kefu.mediaserver.events.CallEnded`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallInput, CallState
from kefu.mediaserver.events import CallEnded
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.tasks import ServerTasks


class CallLifecycle:
    """The live calls (by SIP leg), their admission into the table, and their end."""

    def __init__(self, metrics: Metrics, bus: EventBus, tasks: ServerTasks) -> None:
        self.metrics = metrics
        self.bus = bus
        self.tasks = tasks
        self.calls: dict[str, Call] = {}
        self.idle = asyncio.Event()
        """Set while no call is live (drain waits on it)."""
        self.idle.set()

    def add(self, call: Call) -> None:
        self.calls[call.leg] = call
        self.idle.clear()
        self.metrics.active_calls.set(len(self.calls))

    def by_id(self, call_id: str) -> Call:
        """The live call with kefu's id ``call_id``; KeyError if none."""
        for call in self.calls.values():
            if call.id == call_id:
                return call
        raise KeyError(call_id)

    def has_source(self, peer: object) -> bool:
        """A live call came from ``peer`` (the SIP transport keeps its connection)."""
        return any(c.source == str(peer) for c in self.calls.values())

    def hangup(self, call: Call, reason: str) -> None:
        """Hang up the caller's leg and end the call."""
        if call.caller is not None:
            call.caller.hangup()
        self.end_soon(call, reason)

    def end_soon(
        self, call: Call, reason: str, event: CallInput = CallInput.HANGUP, *, counted: bool = False
    ) -> None:
        self.tasks.spawn(self.end(call, reason, event, counted=counted), "end")

    async def end(
        self, call: Call, reason: str, event: CallInput, *, counted: bool = False
    ) -> None:
        """Tear ``call`` down once (later calls do nothing); ``counted``: already in
        ``calls_total`` (a rejection counts itself)."""
        if self.calls.get(call.leg) is not call:
            return
        del self.calls[call.leg]
        if call.state is not CallState.ENDED:
            call.apply(event, reason)
        call.end_reason = reason
        current = asyncio.current_task()
        for task in list(call.tasks):
            if task is not current:
                task.cancel()
        if call.recording is not None:
            call.recording.close()
        if call.agent is not None:
            await _release(call, "agent", call.agent.close)
        if call.room is not None:
            await _release(call, "room", call.room.leave)
        if call.agent_room is not None:
            await _release(call, "agent_room", call.agent_room.close)
        ep = call.endpoint
        if ep is not None:
            stats = ep.stats
            self.metrics.rtp_packets.labels("in").inc(stats.packets_received)
            self.metrics.rtp_packets.labels("out").inc(stats.packets_sent)
            self.metrics.rtp_dropped.labels("unlatched").inc(stats.dropped_unlatched)
            self.metrics.rtp_dropped.labels("malformed").inc(stats.dropped_malformed)
            self.metrics.rtp_lost.inc(max(0, stats.packets_lost))
            if stats.packets_received:
                self.metrics.rtp_jitter.observe(stats.jitter_ms / 1000)
            await _release(call, "rtp", ep.close)
        if not counted:
            result = "completed" if call.answered else reason.split()[0]
            self.metrics.calls_total.labels(result).inc()
        self.metrics.active_calls.set(len(self.calls))
        call.log.info("call_ended", reason=reason)
        self.bus.publish(CallEnded(call.id, time.time(), reason, call.answered is not None))
        if not self.calls:
            self.idle.set()

    async def end_all(self, reason: str) -> None:
        for call in list(self.calls.values()):
            await self.end(call, reason, CallInput.HANGUP)


async def _release(call: Call, what: str, close: Callable[[], Awaitable[object]]) -> None:
    """Run one teardown step; a failure is logged with the call and never stops the others."""
    try:
        await close()
    except asyncio.CancelledError:
        raise
    except Exception:
        call.log.exception("call_teardown_failed", part=what)

"""A call: its SIP leg, its RTP endpoint, its media, and its state machine."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog

from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call_state import CallInput, CallState, next_state
from kefu.mediaserver.events import CallStateChanged
from kefu.rtp.aio import RtpEndpoint
from kefu.sip.offer_answer import Negotiated


@dataclass(eq=False)
class Call:
    leg: str
    """The SIP user agent's handle for this call's dialog."""
    bus: EventBus
    source: str
    """Where the trunk sent the INVITE from (host:port)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    state: CallState = CallState.RINGING
    created: float = field(default_factory=time.time)
    received_monotonic: float = field(default_factory=time.monotonic)
    answered: float | None = None
    endpoint: RtpEndpoint | None = None
    negotiated: Negotiated | None = None
    transfer_target: str | None = None
    agent: Any = None
    """The AI agent serving the call (media mode ``ai``)."""
    room: Any = None
    """The WebRTC room participant when the call was put into a room."""
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    end_reason: str | None = None
    log: Any = None

    def __post_init__(self) -> None:
        self.log = structlog.get_logger("kefu.call").bind(call_id=self.id, leg=self.leg)

    def apply(self, event: CallInput, reason: str = "") -> CallState:
        old = self.state
        self.state = next_state(old, event)
        if self.state is CallState.AI_ACTIVE and self.answered is None:
            self.answered = time.time()
        self.log.info("call_state", old=old.value, new=self.state.value, reason=reason)
        self.bus.publish(
            CallStateChanged(self.id, time.time(), old.value, self.state.value, reason)
        )
        return self.state

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """Run a task owned by this call; it is cancelled when the call ends."""
        task = asyncio.create_task(coro, name=f"{name}:{self.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def summary(self) -> dict[str, Any]:
        n = self.negotiated
        stats = self.endpoint.stats if self.endpoint else None
        return {
            "call_id": self.id,
            "state": self.state.value,
            "source": self.source,
            "created": self.created,
            "answered": self.answered,
            "codec": n.codec if n else None,
            "rtp": (
                {
                    "received": stats.packets_received,
                    "sent": stats.packets_sent,
                    "lost": stats.packets_lost,
                    "jitter_ms": round(stats.jitter_ms, 2),
                }
                if stats
                else None
            ),
        }

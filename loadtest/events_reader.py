"""A reader of kefu's call events (``GET /api/events``, docs/events.md) in a thread of its own,
for end-to-end tests and benchmarks: every message in order, with when it arrived."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import aiohttp

from kefu.signaling.tokens import mint_token

__all__ = ["EventsReader"]


class EventsReader:
    """A supervisor reading kefu's ``/api/events`` in a thread of its own (the callers, SIPp or
    Chromium, are driven synchronously meanwhile); ``events`` is every message, in order."""

    def __init__(self, http_url: str, secret: str) -> None:
        self.url = http_url.replace("http://", "ws://") + "/api/events"
        self.token = mint_token(secret, "sue", "supervisor")
        self.events: list[dict[str, Any]] = []
        self.arrived: list[float] = []
        """``time.time()`` when each of :attr:`events` arrived."""
        self.subscribed = threading.Event()
        self.stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._read()), daemon=True)

    async def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(self.url, headers=headers) as ws:
                while not self.stop.is_set():
                    try:
                        msg = await ws.receive(timeout=0.2)
                    except TimeoutError:
                        continue
                    if msg.type is not aiohttp.WSMsgType.TEXT:
                        return
                    arrived = time.time()
                    event = json.loads(msg.data)
                    if event["type"] == "events.subscribed":
                        self.subscribed.set()
                    self.arrived.append(arrived)
                    self.events.append(event)

    def __enter__(self) -> EventsReader:
        self._thread.start()
        assert self.subscribed.wait(30), "the events stream never said it was subscribed"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(30)

    def wait_for(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        for _ in range(int(timeout * 10)):
            found = [e for e in self.events if e["type"] == kind]
            if found:
                return found[-1]
            self.stop.wait(0.1)
        raise AssertionError(f"no {kind} event in {timeout} s: {[e['type'] for e in self.events]}")

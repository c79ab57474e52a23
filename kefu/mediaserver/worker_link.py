"""The front's view of the calls its room workers host (front side of :mod:`.worker_api`).

With ``webrtc.room_workers`` above one, a web caller's AI conversation (``room:<id>``) lives
in whichever process hosts its room (:func:`~kefu.signaling.shards.shard_of`). Agents only
ever talk to the front, so the front:

* keeps one events socket open to every worker (``/internal/events`` over its Unix socket)
  and republishes what comes as :class:`~kefu.mediaserver.events.RelayedEvent` on its own
  bus: ``/api/events`` and the workbench see every call of the node. A worker that restarts
  is reconnected to as soon as its socket answers;
* lists the workers' calls with its own (``GET /api/calls``), asking them all at once with a
  short deadline: a worker that does not answer in time is left out, and logged;
* forwards listen, takeover, hand-back, transfers to an agent and notes of a ``room:`` call
  to the worker hosting its room, and turns the answer back into what the local call would
  have raised (404 KeyError, 409 CallStateConflict, 400 ValueError): the HTTP API reads the
  same whichever process holds the call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import structlog

from kefu.errors import CallStateConflict
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import RelayedEvent
from kefu.mediaserver.room_calls import ROOM_CALL_PREFIX
from kefu.mediaserver.room_workers import RoomWorkers
from kefu.mediaserver.worker_api import EVENTS_PATH, calls_path
from kefu.signaling.relay import RELAY_KEY_HEADER
from kefu.signaling.shards import FRONT, shard_of

__all__ = ["WorkerLink"]

log = structlog.get_logger("kefu.worker_link")

_BASE = "http://room-worker"
MAX_EVENT_BYTES = 1 << 20
"""A relayed event larger than this closes the socket (a worker's events are small)."""


class WorkerLink:
    """Events, call lists and call actions of the room workers, for the front."""

    def __init__(
        self,
        workers: RoomWorkers,
        bus: EventBus,
        shards: int,
        *,
        timeout_s: float = 2.0,
        retry_s: float = 0.1,
    ) -> None:
        self.workers = workers
        self.bus = bus
        self.shards = shards
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.relayed = 0
        """Events republished from the workers, in all."""
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # --- which calls are the workers' -----------------------------------------------------

    def shard_for(self, call_id: str) -> int:
        """The shard hosting ``call_id`` (a phone call and the front's rooms: the front)."""
        if not call_id.startswith(ROOM_CALL_PREFIX):
            return FRONT
        return shard_of(call_id[len(ROOM_CALL_PREFIX) :], self.shards)

    # --- events -----------------------------------------------------------------------------

    def start(self) -> None:
        for shard in range(1, self.shards):
            self._tasks.append(
                asyncio.create_task(self._follow(shard), name=f"worker-events-{shard}")
            )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for session in self._sessions.values():
            await session.close()

    async def _follow(self, shard: int) -> None:
        """Republish ``shard``'s events for as long as the front runs, reconnecting."""
        path = self.workers.socket_path(shard)
        while True:
            try:
                async with self._session(shard, path).ws_connect(
                    _BASE + EVENTS_PATH,
                    headers={RELAY_KEY_HEADER: self.workers.key},
                    heartbeat=10.0,
                    max_msg_size=MAX_EVENT_BYTES,
                ) as ws:
                    log.info("worker_events_following", shard=shard)
                    async for message in ws:
                        if message.type is aiohttp.WSMsgType.TEXT:
                            self._republish(shard, message.data)
                        elif message.type is aiohttp.WSMsgType.ERROR:
                            break
                log.warning("worker_events_lost", shard=shard)
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass  # not started yet, or restarting: try again shortly
            await asyncio.sleep(self.retry_s)

    def _republish(self, shard: int, text: str) -> None:
        try:
            body = json.loads(text)
            call_id, at = body["call_id"], float(body["at"])
        except (ValueError, KeyError, TypeError):
            log.warning("worker_event_malformed", shard=shard, chars=len(text))
            return
        if not isinstance(call_id, str):
            return
        self.relayed += 1
        self.bus.publish(RelayedEvent(call_id, at, body))

    # --- calls ------------------------------------------------------------------------------

    async def calls(self) -> list[dict[str, Any]]:
        """Every worker's live calls (a worker down or too slow to answer is left out)."""
        shards = [s for s in range(1, self.shards) if self.workers.socket_for(s)]
        answers = await asyncio.gather(*(self._calls_of(s) for s in shards))
        return [call for answer in answers for call in answer]

    async def _calls_of(self, shard: int) -> list[dict[str, Any]]:
        try:
            status, body = await self._request(shard, "GET", calls_path())
        except KeyError:
            return []
        calls = body.get("calls") if status == 200 else None
        if not isinstance(calls, list):
            log.warning("worker_calls_unreadable", shard=shard, status=status)
            return []
        return [c for c in calls if isinstance(c, dict)]

    async def act(self, call_id: str, action: str, who: str, **fields: Any) -> dict[str, Any]:
        """Run ``action`` on the worker hosting ``call_id``; KeyError: no such call there
        (or its worker is down), CallStateConflict: its state does not allow it, ValueError:
        the worker refused the request's fields (400)."""
        shard = self.shard_for(call_id)
        body = {"who": who, **fields}
        status, answer = await self._request(shard, "POST", calls_path(call_id, action), body)
        if status == 200:
            return answer
        error = answer.get("error")
        error = error if isinstance(error, dict) else {}
        if status == 409:
            state = str(error.get("state", "unknown"))
            raise CallStateConflict(call_id, state, action, owner=error.get("owner"))
        if status == 400:
            raise ValueError(str(error.get("message", "refused")))
        if status != 404:
            log.warning("worker_action_failed", shard=shard, action=action, status=status)
        raise KeyError(call_id)

    async def _request(
        self, shard: int, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON object) from ``shard``'s worker; KeyError when it cannot answer."""
        socket = self.workers.socket_for(shard)
        if socket is None:
            raise KeyError(shard)
        try:
            async with self._session(shard, socket).request(
                method,
                _BASE + path,
                json=body,
                headers={RELAY_KEY_HEADER: self.workers.key},
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as response:
                answer = await response.json(content_type=None)
                return response.status, answer if isinstance(answer, dict) else {}
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            log.warning("worker_unreachable", shard=shard, path=path, error=type(exc).__name__)
            raise KeyError(shard) from None

    def _session(self, shard: int, path: str) -> aiohttp.ClientSession:
        session = self._sessions.get(shard)
        if session is None or session.closed:
            session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path))
            self._sessions[shard] = session
        return session

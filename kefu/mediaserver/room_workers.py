"""Room worker processes: the process half of room sharding (config ``webrtc.room_workers``).

The GIL holds one Python process to one core, and a room's peer connections (ICE, DTLS,
SRTP, forwarding) all run on its process's event loop. With ``room_workers = N`` the front
(the process started by ``kefu serve``: SIP trunk, HTTP, shard 0) starts N - 1 room workers.
Each is a whole kefu server without a SIP listener (its own SFU, signaling hub and, in AI
mode, its own models) that serves HTTP on a Unix socket in a private directory; the front
relays the signaling WebSockets of the rooms it hosts (:mod:`kefu.signaling.relay`), and
ICE/RTP run straight between clients and the worker's UDP ports.

The front supervises its workers: one that exits is restarted with a growing back-off, its
rooms' clients see their socket close and may join again (the SFU's state died with the
process). Workers stop when the front stops, and on their own if the front disappears.
Every ``poll_s`` the front reads each worker's SFU counters, readiness and PID over its
socket, for ``/metrics`` (summed) and ``/readyz`` (per worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
import structlog

from kefu.mediaserver.config import Config
from kefu.signaling.relay import RELAY_KEY_HEADER

__all__ = [
    "AGENTS_HEADER",
    "STATUS_PATH",
    "RoomWorkers",
    "WorkerSpec",
    "wait_exited",
    "worker_main",
]

log = structlog.get_logger("kefu.room_workers")

STATUS_PATH = "/internal/room-worker"
"""A worker's JSON status for the front: ready, pid, SFU counters (relay key required)."""
AGENTS_HEADER = "X-Kefu-Agents-Online"
"""On each status poll: agents signed in at the front (a worker's web calls may wait for
them, :mod:`kefu.mediaserver.agent_queue`)."""


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a room worker process is told at spawn (pickled into the child)."""

    shard: int
    socket_path: str
    key: str
    """Shared secret: the worker trusts the front's client-IP header only with it."""
    front_pid: int


def worker_main(config: Config, spec: WorkerSpec, uvloop_ok: bool) -> None:
    """Entry point of a room worker process (multiprocessing spawn target)."""
    from kefu.mediaserver.server import run_server

    if uvloop_ok:
        try:
            import uvloop

            uvloop.run(run_server(config, worker=spec))
            return
        except ImportError:
            pass
    asyncio.run(run_server(config, worker=spec))


@dataclass
class _Worker:
    spec: WorkerSpec
    process: BaseProcess | None = None
    started_at: float = 0.0
    restarts: int = 0
    status: dict[str, Any] = field(default_factory=dict)
    """The last status read from the worker; empty while it is not answering."""
    http: aiohttp.ClientSession | None = None
    """Talks to the worker's Unix socket (status polls)."""


class RoomWorkers:
    """Starts, supervises and stops the room workers of this front."""

    def __init__(
        self,
        config: Config,
        count: int,
        *,
        uvloop_ok: bool = True,
        poll_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.config = config
        self.key = os.urandom(24).hex()
        self._dir = tempfile.mkdtemp(prefix="kefu-rooms-")
        os.chmod(self._dir, 0o700)
        self._uvloop_ok = uvloop_ok
        self._poll_s = poll_s
        self._max_backoff_s = max_backoff_s
        self._context = multiprocessing.get_context("spawn")
        self._workers = [
            _Worker(
                WorkerSpec(shard, os.path.join(self._dir, f"w{shard}.sock"), self.key, os.getpid())
            )
            for shard in range(1, count + 1)
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self.agents_online: Callable[[], int] = lambda: 0
        """The front's count of signed-in agents, told to every worker each poll."""
        self.on_poll: Callable[[], None] | None = None
        """Called after each round of status polls (the front updates room placement)."""

    # --- what the front asks --------------------------------------------------------------

    def socket_for(self, shard: int) -> str | None:
        """The Unix socket of ``shard``'s worker, None while it is down or not ready yet."""
        if not 1 <= shard <= len(self._workers):
            return None
        worker = self._workers[shard - 1]
        if not self._alive(worker) or not worker.status.get("ready"):
            return None
        return worker.spec.socket_path

    def socket_path(self, shard: int) -> str:
        """Where ``shard``'s worker serves (whether or not it is up)."""
        return self._workers[shard - 1].spec.socket_path

    @property
    def all_ready(self) -> bool:
        return all(self.socket_for(w.spec.shard) for w in self._workers)

    def describe(self) -> list[dict[str, Any]]:
        """Per worker: shard, pid, up, ready, restarts, rooms, participants (for /readyz)."""
        out = []
        for worker in self._workers:
            sfu = worker.status.get("sfu", {})
            out.append(
                {
                    "shard": worker.spec.shard,
                    "pid": worker.process.pid if worker.process else None,
                    "up": self._alive(worker),
                    "ready": bool(worker.status.get("ready")),
                    "restarts": worker.restarts,
                    "rooms": sfu.get("rooms", 0),
                    "participants": sfu.get("participants", 0),
                }
            )
        return out

    def sfu_stats(self) -> dict[str, int]:
        """The workers' SFU counters summed (as last polled)."""
        total: dict[str, int] = {}
        for worker in self._workers:
            for name, value in worker.status.get("sfu", {}).items():
                total[name] = total.get(name, 0) + int(value)
        return total

    # --- life cycle -----------------------------------------------------------------------

    async def start(self) -> None:
        for worker in self._workers:
            self._spawn(worker)
            self._tasks.append(asyncio.create_task(self._supervise(worker)))
        self._tasks.append(asyncio.create_task(self._poll()))

    async def close(self, grace_s: float = 10.0) -> None:
        """SIGTERM every worker (they drain), wait up to ``grace_s``, then SIGKILL."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for worker in self._workers:
            if worker.process is not None and worker.process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for worker in self._workers:
            process = worker.process
            if process is None:
                continue
            await asyncio.to_thread(process.join, max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                await asyncio.to_thread(process.join, 2.0)
        for worker in self._workers:
            if worker.http is not None:
                await worker.http.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    # --- internals ------------------------------------------------------------------------

    @staticmethod
    def _alive(worker: _Worker) -> bool:
        return worker.process is not None and worker.process.is_alive()

    def _spawn(self, worker: _Worker) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(worker.spec.socket_path)
        worker.status = {}
        process = self._context.Process(
            target=worker_main,
            args=(self.config, worker.spec, self._uvloop_ok),
            name=f"kefu-room-worker-{worker.spec.shard}",
            daemon=True,
        )
        process.start()
        worker.process = process
        worker.started_at = time.monotonic()
        log.info("room_worker_spawned", shard=worker.spec.shard, pid=process.pid)

    async def _supervise(self, worker: _Worker) -> None:
        loop = asyncio.get_running_loop()
        backoff = 1.0
        while not self._closing:
            process = worker.process
            assert process is not None
            await wait_exited(loop, process.sentinel)
            process.join(0)
            worker.status = {}
            if self._closing:
                return
            lived = time.monotonic() - worker.started_at
            log.error(
                "room_worker_exited",
                shard=worker.spec.shard,
                pid=process.pid,
                exitcode=process.exitcode,
                lived_s=round(lived, 1),
            )
            # A worker that ran a while gets restarted at once; one that keeps dying, slower.
            backoff = 1.0 if lived > 60.0 else min(backoff * 2.0, self._max_backoff_s)
            await asyncio.sleep(backoff if lived <= 60.0 else 0.0)
            worker.restarts += 1
            self._spawn(worker)

    def room_ids(self, shard: int) -> list[str] | None:
        """The rooms worker ``shard`` reported at its last poll; None: it is not answering."""
        worker = self._workers[shard - 1]
        ids = worker.status.get("room_ids")
        return [str(r) for r in ids] if isinstance(ids, list) else None

    async def _poll(self) -> None:
        while True:
            for worker in self._workers:
                worker.status = await self._read_status(worker) if self._alive(worker) else {}
            if self.on_poll is not None:
                self.on_poll()
            await asyncio.sleep(self._poll_s)

    async def _read_status(self, worker: _Worker) -> dict[str, Any]:
        if worker.http is None:
            worker.http = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=worker.spec.socket_path),
                timeout=aiohttp.ClientTimeout(total=2.0),
            )
        try:
            async with worker.http.get(
                f"http://room-worker{STATUS_PATH}",
                headers={RELAY_KEY_HEADER: self.key, AGENTS_HEADER: str(self.agents_online())},
            ) as response:
                return dict(await response.json()) if response.status == 200 else {}
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return {}


async def wait_exited(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    """Wait until ``fd`` is readable: a process sentinel or pidfd is, once it has exited."""
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)

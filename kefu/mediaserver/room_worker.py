"""A room worker process: one ``KefuServer`` with ``worker=WorkerSpec(...)``.

It serves WebRTC rooms only: no SIP listener, HTTP on the Unix socket the front relays
signaling to, plus a status path the front polls and its calls' events and actions for the
front (:mod:`kefu.mediaserver.worker_api`). The front's side of this — spawning,
restarting and polling the workers — is :mod:`kefu.mediaserver.room_workers`.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from kefu.mediaserver.room_workers import AGENTS_HEADER, STATUS_PATH, WorkerSpec, wait_exited
from kefu.mediaserver.worker_api import add_worker_routes
from kefu.signaling.ws import add_signaling_routes, key_matches

if TYPE_CHECKING:
    from kefu.mediaserver.server import KefuServer

log = structlog.get_logger("kefu.server")


async def start_room_worker(server: KefuServer, spec: WorkerSpec) -> None:
    """Serve rooms on the Unix socket the front relays to; no SIP here."""
    structlog.contextvars.bind_contextvars(room_worker=spec.shard)
    app = server.control.http_app()
    add_signaling_routes(app, server.signaling, relay_key=spec.key)

    async def status(request: web.Request) -> web.Response:
        if not key_matches(request, spec.key):
            return web.json_response({"error": {"code": "forbidden"}}, status=403)
        agents = request.headers.get(AGENTS_HEADER, "0")
        server.control.front_agents = int(agents) if agents.isdigit() else 0
        ready, _ = server.ready()
        return web.json_response(
            {
                "ready": ready,
                "pid": os.getpid(),
                "sfu": server.rooms.sfu.stats(),
                "room_ids": server.rooms.sfu.room_ids(),
            }
        )

    app.router.add_get(STATUS_PATH, status)
    add_worker_routes(app, server, spec.key)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    server.http = runner
    await runner.setup()
    await web.UnixSite(runner, spec.socket_path).start()
    server.spawn(server.metrics.watch_loop_lag(), "loop-lag")
    server.spawn(server.sweep_rooms(), "room-sweep")
    log.info("room_worker_started", shard=spec.shard, socket=spec.socket_path)


async def stop_when_orphaned(front_pid: int, stop: asyncio.Event) -> None:
    """A room worker whose front died (SIGKILL, crash) stops instead of serving nobody."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(front_pid)
    except ProcessLookupError:
        fd = -1
    if fd >= 0:
        try:
            await wait_exited(loop, fd)
        finally:
            os.close(fd)
    log.warning("room_worker_orphaned", front_pid=front_pid)
    stop.set()

"""The front process: the one ``kefu serve`` starts (``KefuServer`` with ``worker=None``).

It listens for the SIP trunk, serves HTTP (health, metrics, the call API, ``/api/events``,
the caller page and signaling), hosts room shard 0 itself, and with ``webrtc.room_workers``
above one starts and supervises the room workers (:mod:`kefu.mediaserver.room_workers`),
relaying each room's signaling WebSocket to the process hosting it, and showing the calls
the workers host as its own (:mod:`kefu.mediaserver.worker_link`).
"""

from __future__ import annotations

import ipaddress
import time
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from kefu.cluster.front import start_cluster_front, wire_cluster
from kefu.mediaserver.agent_room import AGENT_ROOM_PREFIX
from kefu.mediaserver.room_workers import RoomWorkers
from kefu.mediaserver.tls import server_context
from kefu.mediaserver.worker_link import WorkerLink
from kefu.signaling.relay import ShardRelay
from kefu.signaling.shards import FRONT, ShardRouter
from kefu.signaling.ws import READ_LIMIT, add_signaling_routes

if TYPE_CHECKING:
    from kefu.mediaserver.server import KefuServer

log = structlog.get_logger("kefu.server")


def observe_shards(server: KefuServer, router: ShardRouter) -> None:
    """Tell the router which rooms each shard hosts (after each poll of the workers)."""
    workers = server.room_workers
    assert workers is not None
    now = time.monotonic()
    router.observe(FRONT, server.rooms.sfu.room_ids(), now)
    for shard in range(1, server.shards):
        rooms = workers.room_ids(shard)
        if rooms is not None:
            router.observe(shard, rooms, now)


async def start_front(server: KefuServer) -> None:
    """Bind SIP, start the room workers and the relay, then serve HTTP."""
    config = server.config
    listen = config.sip.listen
    server.sip_address = await server.sip.start(listen.host, listen.port)
    server.ua.set_local_address(*server.sip_address)
    sip = config.sip
    if sip.tls_listen is not None and sip.tls_cert and sip.tls_key:
        context = server_context(
            sip.tls_cert,
            sip.tls_key,
            section="sip",
            ca=sip.tls_ca,
            verify_client=sip.tls_verify_client,
        )
        tls = sip.tls_listen
        server.sip_tls_address = await server.sip.start_tls(tls.host, tls.port, context)
        server.ua.set_tls_port(server.sip_tls_address[1])
    if server.shards > 1:
        workers = RoomWorkers(config, server.shards - 1, uvloop_ok=server.uvloop_ok)
        server.room_workers = workers
        workers.agents_online = server.control.agents_online
        await workers.start()
        server.worker_link = WorkerLink(workers, server.bus, server.shards)
        server.worker_link.start()
        router = ShardRouter(
            server.shards,
            pinned=server.sip_rooms,
            pinned_prefixes=(AGENT_ROOM_PREFIX,),
            resume_grace_s=server.signaling.settings.resume_grace_s + 5.0,
        )
        server.relay = ShardRelay(router, workers.socket_for, workers.key, read_limit=READ_LIMIT)
        workers.on_poll = lambda: observe_shards(server, router)
    elif server.cluster is not None:
        # One process, but sockets may still be relayed to other nodes.
        router = ShardRouter(1, resume_grace_s=server.signaling.settings.resume_grace_s + 5.0)
        server.relay = ShardRelay(router, lambda _: None, "", read_limit=READ_LIMIT)
    app = server.control.http_app()
    routing = None
    if server.cluster is not None:
        assert server.relay is not None
        routing = wire_cluster(server, app, server.relay)
    add_signaling_routes(app, server.signaling, relay=server.relay, cluster=routing)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    server.http = runner
    await runner.setup()
    http = config.http
    https = None
    if http.tls_cert and http.tls_key:
        https = server_context(http.tls_cert, http.tls_key, section="http")
    elif not ipaddress.ip_address(http.listen.host).is_loopback:
        log.warning("http_without_tls", listen=str(http.listen), hint="set http.tls_cert/tls_key")
    site = web.TCPSite(runner, http.listen.host, http.listen.port, ssl_context=https)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.http_address = (host, port)
    scheme = "https" if https is not None else "http"
    if server.cluster is not None:
        await start_cluster_front(server, f"{scheme}://{host}:{port}")
    server.spawn(server.metrics.watch_loop_lag(), "loop-lag")
    server.spawn(server.sweep_rooms(), "room-sweep")
    log.info(
        "kefu_started",
        sip=f"{server.sip_address[0]}:{server.sip_address[1]}",
        sip_tls=server.sip_tls_address and "{}:{}".format(*server.sip_tls_address),
        http=f"{scheme}://{host}:{port}",
        media_mode=config.calls.media_mode,
        rtp_ports="{}-{}".format(*config.rtp.ports),
        room_shards=server.shards,
    )

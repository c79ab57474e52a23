"""The cluster's HTTP surface on every node.

* ``GET /api/cluster`` (admin token): the live nodes (their heartbeat: addresses, load, calls,
  rooms, draining) and every room with its node, read from Redis; 503 ``state_unavailable``
  while Redis is lost.
* Call control for a call another node hosts: ``POST /api/calls/<id>/...`` is forwarded to
  that node (same method, body and token; it checks the token again) and its answer returned,
  so a workbench on any node can take over, hand back, transfer or hang up any call.
* ``POST /api/calls`` (an outbound call) is placed by the node that took the request: it
  is neither forwarded nor aggregated (only ``/api/calls/<id>/...`` is forwarded).
* ``GET /api/calls`` lists every node's calls (each node's own list, asked in parallel; a
  node that does not answer within :data:`ASK_TIMEOUT_S` is left out and named in
  ``unreachable``).

A forwarded request carries ``X-Kefu-Cluster-Hop`` with the cluster key; a node answers such
a request itself and never forwards it again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import hdrs, web

from kefu.cluster.node import ClusterNode
from kefu.cluster.redis_link import REDIS_ERRORS
from kefu.signaling.http import CLAIMS_KEY, error_response
from kefu.signaling.relay import HOP_HEADER, RELAY_KEY_HEADER
from kefu.signaling.ws import key_matches

__all__ = ["add_cluster_routes"]

log = structlog.get_logger("kefu.cluster")

ASK_TIMEOUT_S = 2.0
_CALL_ACTION = "/api/calls/"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _hop(request: web.Request, key: str) -> bool:
    return HOP_HEADER in request.headers and key_matches(request, key)


def add_cluster_routes(app: web.Application, node: ClusterNode, key: str) -> None:
    """Mount ``/api/cluster`` and the forwarding of call control on ``app`` (before start)."""
    client: dict[str, aiohttp.ClientSession] = {}

    def session() -> aiohttp.ClientSession:
        if "s" not in client or client["s"].closed:
            client["s"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT_S))
        return client["s"]

    def headers_for(request: web.Request) -> dict[str, str]:
        out = {HOP_HEADER: node.node_id, RELAY_KEY_HEADER: key}
        auth = request.headers.get(hdrs.AUTHORIZATION)
        if auth is not None:
            out[hdrs.AUTHORIZATION] = auth
        return out

    async def cluster(request: web.Request) -> web.Response:
        if request[CLAIMS_KEY].role != "admin":
            return error_response(403, "forbidden", "the cluster view needs an admin token")
        try:
            view = await node.view()
        except REDIS_ERRORS as exc:
            node.link.failed(exc)
            return error_response(503, "state_unavailable", "Redis cannot be reached")
        return web.json_response({**view, "state": node.describe()})

    async def forward(request: web.Request, call_id: str) -> web.StreamResponse | None:
        try:
            owner = await node.registry.call_node(call_id)
        except REDIS_ERRORS as exc:
            node.link.failed(exc)
            return None
        if owner is None or owner == node.node_id:
            return None
        info = node.nodes.get(owner) or await node.registry.node(owner)
        if info is None or not info.http:
            return None
        url = info.http.rstrip("/") + request.path_qs
        body = await request.read()
        try:
            async with session().request(
                request.method, url, data=body, headers=headers_for(request)
            ) as answer:
                payload = await answer.read()
                log.info("cluster.control_forwarded", call_id=call_id, node=owner)
                return web.Response(
                    body=payload,
                    status=answer.status,
                    content_type=answer.content_type,
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("cluster.control_forward_failed", node=owner, error=str(exc))
            return error_response(
                502, "node_unreachable", f"the node hosting call {call_id} did not answer"
            )

    async def all_calls(request: web.Request, handler: Handler) -> web.StreamResponse:
        own = await handler(request)
        if not isinstance(own, web.Response) or own.status != 200:
            return own
        if not isinstance(own.body, bytes | bytearray):
            return own
        calls: list[dict[str, Any]] = [
            {**c, "node": node.node_id} for c in json.loads(own.body)["calls"]
        ]
        others = [n for n in node.nodes.values() if n.id != node.node_id and n.http]

        async def ask(url: str) -> list[dict[str, Any]] | None:
            try:
                async with session().get(url, headers=headers_for(request)) as answer:
                    if answer.status != 200:
                        return None
                    data = await answer.json()
                    listed = data.get("calls") if isinstance(data, dict) else None
                    return listed if isinstance(listed, list) else None
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return None

        answers = await asyncio.gather(*(ask(n.http.rstrip("/") + "/api/calls") for n in others))
        unreachable = []
        for other, listed in zip(others, answers, strict=True):
            if listed is None:
                unreachable.append(other.id)
                continue
            calls += [{**c, "node": other.id} for c in listed if isinstance(c, dict)]
        return web.json_response({"calls": calls, "unreachable": unreachable})

    @web.middleware
    async def across_nodes(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _hop(request, key) or CLAIMS_KEY not in request:
            return await handler(request)
        path = request.path
        if request.method == "GET" and path == "/api/calls":
            return await all_calls(request, handler)
        if request.method == "POST" and path.startswith(_CALL_ACTION):
            call_id = path[len(_CALL_ACTION) :].partition("/")[0]
            forwarded = await forward(request, call_id) if call_id else None
            if forwarded is not None:
                return forwarded
        return await handler(request)

    async def close(_: web.Application) -> None:
        if "s" in client:
            await client["s"].close()

    app.middlewares.append(across_nodes)
    app.router.add_get("/api/cluster", cluster)
    app.on_cleanup.append(close)

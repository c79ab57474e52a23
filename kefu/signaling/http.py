"""The HTTP port: health, readiness, Prometheus metrics and a small call-control API.

signaling/ is the only user of aiohttp; the media server hands in a :class:`Control`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

MAX_BODY = 64 * 1024


class Control(Protocol):
    def ready(self) -> tuple[bool, dict[str, Any]]: ...
    def metrics_text(self) -> bytes: ...
    def list_calls(self) -> list[dict[str, Any]]: ...
    def transfer(self, call_id: str, target: str | None) -> None: ...
    def hangup(self, call_id: str) -> None: ...


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def build_app(control: Control) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ready, detail = control.ready()
        return web.json_response(
            {"status": "ready" if ready else "not ready", **detail}, status=200 if ready else 503
        )

    async def metrics(_: web.Request) -> web.Response:
        response = web.Response(body=control.metrics_text())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def calls(_: web.Request) -> web.Response:
        return web.json_response({"calls": control.list_calls()})

    async def transfer(request: web.Request) -> web.Response:
        target: str | None = None
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return _error(400, "bad_json", "body is not valid JSON")
            if not isinstance(body, dict) or not isinstance(body.get("target", ""), str):
                return _error(400, "bad_request", 'expected {"target": "sip:..."}')
            target = body.get("target")
        try:
            control.transfer(request.match_info["call_id"], target)
        except KeyError:
            return _error(404, "unknown_call", "no such call")
        except ValueError as exc:
            return _error(409, "cannot_transfer", str(exc))
        return web.json_response({"status": "transferring"}, status=202)

    async def hangup(request: web.Request) -> web.Response:
        try:
            control.hangup(request.match_info["call_id"])
        except KeyError:
            return _error(404, "unknown_call", "no such call")
        return web.json_response({"status": "ending"}, status=202)

    web_root = Path(__file__).resolve().parent.parent / "web"

    async def index(_: web.Request) -> web.StreamResponse:
        page = web_root / "index.html"
        if not page.is_file():
            return _error(404, "no_page", "the caller page is not installed")
        return web.FileResponse(page)

    app.router.add_get("/", index)
    if web_root.is_dir():
        app.router.add_static("/web/", web_root, follow_symlinks=False)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/calls", calls)
    app.router.add_post("/api/calls/{call_id}/transfer", transfer)
    app.router.add_post("/api/calls/{call_id}/hangup", hangup)
    return app

"""The HTTP port: health, readiness, Prometheus metrics and the call-control API.

signaling/ is the only user of aiohttp; the media server hands in a :class:`Control`.

``/healthz``, ``/readyz`` and ``/metrics`` are open (load balancers and Prometheus read them on
the private network). Everything under ``/api/`` needs a token
(:mod:`kefu.signaling.api_access`): without a valid one 401 ``unauthorized`` with
``WWW-Authenticate: Bearer``, with a role that may not use the API 403 ``forbidden``.
Transfer targets must pass the allow-list (403 ``target_not_allowed``, nothing sent), and
every transfer and hang-up is logged (``control_action``) with who asked and what came of it.
``GET /api/events`` (kefu.signaling.events_ws) checks its own token after the upgrade.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiohttp import hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST

from kefu.errors import CallStateConflict, ResourceExhausted
from kefu.signaling.api_access import TransferAllowList, bearer_token, check_role
from kefu.signaling.auth import Authenticator, Claims
from kefu.signaling.client_address import client_ip
from kefu.signaling.dial_request import DialRequest, DialRequestError, parse_dial_request
from kefu.signaling.errors import AuthError

MAX_BODY = 64 * 1024
MAX_NOTE = 4000
MAX_DIAL_BODY = 16 * 1024
"""Bytes in a ``POST /api/calls`` body; more is 400 ``body_too_large``."""
DIAL_ROLES = frozenset({"agent", "admin"})
"""Roles that may place outbound calls (docs/trunk.md#outbound-calls)."""
"""Characters in one agent note."""
API_PREFIX = "/api/"
_OWN_AUTH = ("/api/events",)
"""API paths that check their token themselves (a WebSocket is refused after its upgrade)."""

STAFF_LEADS = frozenset({"supervisor", "admin"})
"""Roles that may pass on a call another agent holds."""

CLAIMS_KEY = web.RequestKey("kefu_claims", Claims)

log = structlog.get_logger("kefu.api")


class Control(Protocol):
    def ready(self) -> tuple[bool, dict[str, Any]]: ...
    def metrics_text(self) -> bytes: ...
    # list_calls and note may be coroutines too.
    def list_calls(self) -> Any: ...
    # who: the token's user; supervisor: a role that may act on calls other agents hold.
    def transfer(self, call_id: str, target: str | None, who: str, *, supervisor: bool) -> None: ...
    def hangup(self, call_id: str, who: str, *, supervisor: bool) -> None: ...
    # The call-switching operations may be coroutines; a dict result joins the response.
    def takeover(self, call_id: str, who: str) -> Any: ...
    def handback(self, call_id: str, who: str, *, supervisor: bool) -> Any: ...
    def listen(self, call_id: str, who: str) -> Any: ...
    def note(self, call_id: str, who: str, text: str) -> Any: ...
    def assign(self, call_id: str, who: str, to: str, *, supervisor: bool) -> Any: ...
    # An outbound call (POST /api/calls); may be a coroutine; its dict result is the answer.
    def dial(self, request: DialRequest, who: str) -> Any: ...


def error_response(status: int, code: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, **extra}}, status=status)


def wrong_state(exc: CallStateConflict) -> web.Response:
    """409 ``wrong_state`` with the call's current state: the request changed nothing."""
    extra = {"owner": exc.owner} if exc.owner else {}
    return error_response(409, "wrong_state", str(exc), state=exc.state, **extra)


_error = error_response


async def authorize(auth: Authenticator, token: str | None) -> Claims:
    """The claims of a token that may use the API; AuthError ``bad_token`` or ``forbidden``."""
    if not token:
        raise AuthError("a token is required (Authorization: Bearer <token>)")
    claims = await auth.verify(token)
    check_role(claims)
    return claims


def refusal(exc: AuthError, *, ip: str, path: str) -> web.Response:
    """401 (no or bad token) or 403 (role not allowed), logged; RFC 6750 section 3."""
    forbidden = exc.code == "forbidden"
    status, code = (403, "forbidden") if forbidden else (401, "unauthorized")
    challenge = 'Bearer realm="kefu"' + (', error="insufficient_scope"' if forbidden else "")
    log.info("api_refused", ip=ip, path=path, code=code, reason=str(exc))
    response = error_response(status, code, str(exc))
    response.headers[hdrs.WWW_AUTHENTICATE] = challenge
    return response


def _is_api(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else ""
    path = request.path
    if path in _OWN_AUTH or canonical in _OWN_AUTH:
        return False
    return path.startswith(API_PREFIX) or canonical.startswith(API_PREFIX)


def build_app(
    control: Control,
    *,
    auth: Authenticator,
    transfer_allow: TransferAllowList | None = None,
    max_context_bytes: int = 4096,
) -> web.Application:
    """The HTTP app; ``auth`` checks ``/api/*`` tokens, ``transfer_allow`` the REFER targets
    (None: only the server's own ``sip.transfer_target``, i.e. no target in the body)."""
    allow = transfer_allow or TransferAllowList()

    @web.middleware
    async def require_token(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not _is_api(request):
            return await handler(request)
        ip = client_ip(request)
        try:
            claims = await authorize(auth, bearer_token(request.headers.get(hdrs.AUTHORIZATION)))
        except AuthError as exc:
            return refusal(exc, ip=ip, path=request.path)
        request[CLAIMS_KEY] = claims
        return await handler(request)

    app = web.Application(client_max_size=MAX_BODY, middlewares=[require_token])

    def audit(request: web.Request, action: str, call_id: str, outcome: str, **kw: Any) -> None:
        claims = request[CLAIMS_KEY]
        log.info(
            "control_action",
            action=action,
            call_id=call_id,
            user=claims.user,
            role=claims.role,
            ip=client_ip(request),
            outcome=outcome,
            **kw,
        )

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
        listed = control.list_calls()
        if inspect.isawaitable(listed):
            listed = await listed
        return web.json_response({"calls": listed})

    async def transfer(request: web.Request) -> web.Response:
        call_id = request.match_info["call_id"]
        target: str | None = None
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                audit(request, "transfer", call_id, "bad_json")
                return _error(400, "bad_json", "body is not valid JSON")
            if not isinstance(body, dict) or not isinstance(body.get("target", ""), str):
                audit(request, "transfer", call_id, "bad_request")
                return _error(400, "bad_request", 'expected {"target": "sip:..."}')
            if "agent" in body:
                return await to_agent(request, call_id, body.get("agent"))
            target = body.get("target") or None
        if not allow.allows(target):
            audit(request, "transfer", call_id, "target_not_allowed", target=target)
            return _error(403, "target_not_allowed", "target is not in calls.transfer_allow")
        try:
            claims = request[CLAIMS_KEY]
            control.transfer(call_id, target, claims.user, supervisor=claims.role in STAFF_LEADS)
        except KeyError:
            audit(request, "transfer", call_id, "unknown_call", target=target)
            return _error(404, "unknown_call", "no such call")
        except CallStateConflict as exc:
            audit(request, "transfer", call_id, "wrong_state", target=target, state=exc.state)
            return wrong_state(exc)
        except ValueError as exc:
            audit(request, "transfer", call_id, "cannot_transfer", target=target, error=str(exc))
            return _error(409, "cannot_transfer", str(exc))
        audit(request, "transfer", call_id, "accepted", target=target)
        return web.json_response({"status": "transferring"}, status=202)

    async def to_agent(request: web.Request, call_id: str, agent: object) -> web.Response:
        """``{"agent": "bob"}``: pass a call a human holds to another agent, no REFER."""
        claims = request[CLAIMS_KEY]
        if not isinstance(agent, str):
            audit(request, "assign", call_id, "bad_request")
            return _error(400, "bad_request", 'expected {"agent": "<user>"}')
        try:
            result = control.assign(
                call_id, claims.user, agent, supervisor=claims.role in STAFF_LEADS
            )
            if inspect.isawaitable(result):
                result = await result
        except KeyError:
            audit(request, "assign", call_id, "unknown_call", to=agent)
            return _error(404, "unknown_call", "no such call")
        except CallStateConflict as exc:
            audit(request, "assign", call_id, "wrong_state", to=agent, state=exc.state)
            return wrong_state(exc)
        except ValueError as exc:
            audit(request, "assign", call_id, "bad_request", error=str(exc))
            return _error(400, "bad_request", str(exc))
        audit(request, "assign", call_id, "accepted", to=agent)
        return web.json_response({"status": "assigned", **(result or {})})

    async def hangup(request: web.Request) -> web.Response:
        call_id = request.match_info["call_id"]
        try:
            claims = request[CLAIMS_KEY]
            control.hangup(call_id, claims.user, supervisor=claims.role in STAFF_LEADS)
        except KeyError:
            audit(request, "hangup", call_id, "unknown_call")
            return _error(404, "unknown_call", "no such call")
        audit(request, "hangup", call_id, "accepted")
        return web.json_response({"status": "ending"}, status=202)

    async def note(request: web.Request) -> web.Response:
        call_id = request.match_info["call_id"]
        try:
            body = await request.json()
        except ValueError:
            audit(request, "note", call_id, "bad_json")
            return _error(400, "bad_json", "body is not valid JSON")
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_NOTE:
            audit(request, "note", call_id, "bad_request")
            return _error(400, "bad_request", f'expected {{"text": "..."}} of 1-{MAX_NOTE} chars')
        try:
            noted = control.note(call_id, request[CLAIMS_KEY].user, text)
            if inspect.isawaitable(noted):
                await noted
        except KeyError:
            audit(request, "note", call_id, "unknown_call")
            return _error(404, "unknown_call", "no such call")
        audit(request, "note", call_id, "accepted", chars=len(text))
        return web.json_response({"status": "noted"}, status=201)

    async def dial(request: web.Request) -> web.Response:
        """``POST /api/calls``: place an outbound call (kefu.signaling.dial_request)."""
        claims = request[CLAIMS_KEY]
        if claims.role not in DIAL_ROLES:
            audit(request, "dial", "", "forbidden")
            return _error(403, "forbidden", "placing calls needs an agent or admin token")
        raw = await request.content.read(MAX_DIAL_BODY + 1)
        if len(raw) > MAX_DIAL_BODY:
            audit(request, "dial", "", "body_too_large")
            return _error(400, "body_too_large", f"the body is over {MAX_DIAL_BODY} bytes")
        try:
            body = json.loads(raw)
        except ValueError:
            audit(request, "dial", "", "bad_json")
            return _error(400, "bad_json", "body is not valid JSON")
        try:
            wanted = parse_dial_request(body, max_context_bytes=max_context_bytes)
        except DialRequestError as exc:
            audit(request, "dial", "", exc.code, error=str(exc))
            return _error(400, exc.code, str(exc))
        try:
            result = control.dial(wanted, claims.user)
            if inspect.isawaitable(result):
                result = await result
        except ResourceExhausted as exc:
            audit(request, "dial", "", "unavailable", error=str(exc))
            response = _error(503, "unavailable", str(exc))
            response.headers[hdrs.RETRY_AFTER] = "5"
            return response
        except ValueError as exc:
            audit(request, "dial", "", "cannot_route", to=wanted.to, error=str(exc))
            return _error(400, "cannot_route", str(exc))
        audit(request, "dial", result["call_id"], "accepted", to=wanted.to)
        return web.json_response({"status": "dialing", **result}, status=202)

    def switch(action: str, status: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        """``takeover`` or ``handback``: who has the call moves between the AI and a human."""

        async def handler(request: web.Request) -> web.Response:
            call_id = request.match_info["call_id"]
            claims = request[CLAIMS_KEY]
            # Only the holder (or a supervisor) hands a call back; anyone may take it from the AI.
            lead = {"supervisor": claims.role in STAFF_LEADS} if action == "handback" else {}
            try:
                result = getattr(control, action)(call_id, claims.user, **lead)
                if inspect.isawaitable(result):
                    result = await result
            except KeyError:
                audit(request, action, call_id, "unknown_call")
                return _error(404, "unknown_call", "no such call")
            except CallStateConflict as exc:
                audit(request, action, call_id, "wrong_state", state=exc.state, owner=exc.owner)
                return wrong_state(exc)
            audit(request, action, call_id, "accepted")
            body = {"status": status} if status else {}
            return web.json_response({**body, **(result or {})})

        return handler

    web_root = Path(__file__).resolve().parent.parent / "web"

    def page(name: str, what: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def serve(_: web.Request) -> web.StreamResponse:
            path = web_root / name
            if not path.is_file():
                return _error(404, "no_page", f"the {what} is not installed")
            return web.FileResponse(path)

        return serve

    index = page("index.html", "caller page")
    workbench = page("agent.html", "agent workbench")

    app.router.add_get("/", index)
    if web_root.is_dir():
        app.router.add_static("/web/", web_root, follow_symlinks=False)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/calls", calls)
    app.router.add_post("/api/calls", dial)
    app.router.add_post("/api/calls/{call_id}/transfer", transfer)
    app.router.add_post("/api/calls/{call_id}/hangup", hangup)
    app.router.add_post("/api/calls/{call_id}/takeover", switch("takeover", "human_active"))
    app.router.add_post("/api/calls/{call_id}/handback", switch("handback", "ai_active"))
    app.router.add_post("/api/calls/{call_id}/listen", switch("listen", ""))
    app.router.add_post("/api/calls/{call_id}/notes", note)
    app.router.add_get("/agent", workbench)
    return app

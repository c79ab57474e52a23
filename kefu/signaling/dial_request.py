"""The body of ``POST /api/calls`` (an outbound call), checked strictly (no I/O, no aiohttp).

``{"to": "sip:…", "media_mode": "ai"|"echo"|"prompt", "from": …, "context": {…}}``; only
``to`` is required. Every problem is a :class:`DialRequestError` whose ``code`` the API
answers with (400): ``bad_request`` (not an object, a field kefu does not know),
``bad_uri``, ``unknown_mode``, ``bad_from``, ``bad_context``, ``context_too_large``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kefu.errors import SipParseError
from kefu.sip.uri import SipUri

__all__ = ["DIAL_FIELDS", "DIAL_MODES", "DialRequest", "DialRequestError", "parse_dial_request"]

DIAL_MODES = ("ai", "echo", "prompt")
DIAL_FIELDS = frozenset({"to", "media_mode", "from", "context"})
MAX_URI = 512
_FORBIDDEN = frozenset("\r\n\0<>\"' \t")


class DialRequestError(ValueError):
    """A bad ``POST /api/calls`` body; ``code`` is the API's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class DialRequest:
    """A checked outbound-call request."""

    to: str
    """The SIP URI to call (``sip:user@host[:port]``, no ``?headers``)."""
    media_mode: str | None = None
    """``ai``, ``echo`` or ``prompt``; None: the server's ``calls.media_mode``."""
    from_: str | None = None
    """kefu's From: a SIP URI, or a user part put before ``trunk.from_domain``; None:
    ``trunk.from_user``."""
    context: dict[str, Any] = field(default_factory=dict)
    """Whatever the caller wants the call to carry (events, ``GET /api/calls``, the AI's
    ``greeting``)."""


def _uri(value: object, code: str, what: str) -> SipUri:
    if not isinstance(value, str) or not value:
        raise DialRequestError(code, f"{what} must be a non-empty string (a sip: URI)")
    if len(value) > MAX_URI or any(c in _FORBIDDEN for c in value):
        raise DialRequestError(code, f"{what} must be one URI without spaces, quotes or <>")
    try:
        uri = SipUri.parse(value)
    except SipParseError as exc:
        raise DialRequestError(code, f"{what} is not a SIP URI: {exc}") from None
    if uri.scheme == "sips":
        raise DialRequestError(code, f"{what}: sips: needs SIP over TLS, which kefu lacks")
    if uri.scheme != "sip" or not uri.host:
        raise DialRequestError(code, f"{what} must be a sip: URI with a host")
    if uri.headers:
        raise DialRequestError(code, f"{what} may not carry ?headers")
    return uri


def parse_dial_request(body: object, *, max_context_bytes: int = 4096) -> DialRequest:
    """The request in a decoded JSON ``body``, or :class:`DialRequestError`."""
    if not isinstance(body, dict):
        raise DialRequestError("bad_request", 'expected a JSON object {"to": "sip:..."}')
    unknown = sorted(set(body) - DIAL_FIELDS)
    if unknown:
        raise DialRequestError("bad_request", f"unknown field(s): {', '.join(map(str, unknown))}")
    if "to" not in body:
        raise DialRequestError("bad_uri", '"to" is required')
    to = _uri(body["to"], "bad_uri", '"to"')
    mode = body.get("media_mode")
    if mode is not None and mode not in DIAL_MODES:
        raise DialRequestError(
            "unknown_mode", f'"media_mode" must be one of {", ".join(DIAL_MODES)}, got {mode!r}'
        )
    sender = body.get("from")
    if sender is not None:
        if isinstance(sender, str) and ":" not in sender:
            if not sender or len(sender) > 64 or any(c in _FORBIDDEN | set("@;:") for c in sender):
                raise DialRequestError("bad_from", '"from" must be a sip: URI or a user part')
        else:
            _uri(sender, "bad_from", '"from"')
    context = body.get("context", {})
    if not isinstance(context, dict):
        raise DialRequestError("bad_context", '"context" must be a JSON object')
    size = len(json.dumps(context, ensure_ascii=False).encode())
    if size > max_context_bytes:
        raise DialRequestError(
            "context_too_large", f'"context" is {size} bytes as JSON, over {max_context_bytes}'
        )
    return DialRequest(str(to), mode, sender, context)

"""Signaling errors: every one carries a stable ``code`` (sent to clients) and, where the
error ends the WebSocket, the ``close_code`` the server closes it with.

Remote faults (a client sent garbage, a bad token, too many messages) derive from
:class:`kefu.errors.RemoteError`; the server answers with an ``error`` message and keeps
serving everyone else. Close codes are documented in docs/signaling.md.
"""

from __future__ import annotations

from kefu.errors import AuthError as _BaseAuthError
from kefu.errors import RemoteError

# WebSocket close codes (RFC 6455 section 7.4.2 leaves 4000-4999 to applications).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_INTERNAL = 1011
CLOSE_REPLACED = 4000
CLOSE_BAD_TOKEN = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_UNKNOWN_ROOM = 4404
CLOSE_HEARTBEAT_TIMEOUT = 4408
CLOSE_ROOM_FULL = 4409
CLOSE_UNKNOWN_SESSION = 4410
CLOSE_RATE_LIMITED = 4429
CLOSE_NODE_FULL = 4503


class SignalingError(RemoteError):
    """A client-caused signaling failure with a stable machine-readable ``code``."""

    code = "signaling_error"
    close_code: int | None = None
    """WebSocket close code when this error ends the socket; None keeps it open."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ProtocolError(SignalingError, ValueError):
    """A message could not be parsed: bad_json, unknown_type, bad_message, too_large."""

    code = "bad_message"


class AuthError(_BaseAuthError, SignalingError):
    """A token is missing, malformed, expired or wrongly signed (``bad_token``), or does not
    allow the action (``forbidden``, ``unknown_room``)."""

    code = "bad_token"
    close_code = CLOSE_BAD_TOKEN

    def __init__(self, message: str, *, code: str = "bad_token") -> None:
        super().__init__(message, code=code)
        self.close_code = {
            "bad_token": CLOSE_BAD_TOKEN,
            "forbidden": CLOSE_FORBIDDEN,
            "unknown_room": CLOSE_UNKNOWN_ROOM,
        }.get(code, CLOSE_FORBIDDEN)


class RateLimited(SignalingError):
    """A client (IP or user) exceeded its token bucket."""

    code = "rate_limited"
    close_code = CLOSE_RATE_LIMITED


class StateError(SignalingError):
    """A message arrived that the session's state does not accept (offer before join...)."""

    code = "bad_state"

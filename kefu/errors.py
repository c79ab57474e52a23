"""The one exception tree of kefu.

Errors are split by whose fault they are:

* :class:`RemoteError` — a peer sent something we cannot accept (malformed SIP, bad SDP,
  RTP garbage). The server answers or drops and keeps serving everyone else.
* :class:`LocalError` — kefu itself is misconfigured or misused (bad config key, illegal
  state transition, exhausted port range). These point at our code or our operator.

Parsing errors also derive from :class:`ValueError` so wire-format ``parse()`` functions keep
the conventional contract.
"""

from __future__ import annotations


class KefuError(Exception):
    """Base of every error kefu raises on purpose."""


class RemoteError(KefuError):
    """A peer sent something invalid; answer or drop, never crash."""


class LocalError(KefuError):
    """kefu is misconfigured or was misused."""


# --- remote ------------------------------------------------------------------------------


class SipParseError(RemoteError, ValueError):
    """A SIP message could not be parsed.

    ``header`` names the offending header when one is to blame (for the 400 reason phrase);
    ``status`` is the response code a UAS should send (400 unless said otherwise, e.g. 505
    for an unsupported SIP version); ``framing`` is True when the message could not even be
    delimited (no response can be formed on UDP: drop it).
    """

    def __init__(
        self,
        message: str,
        *,
        header: str | None = None,
        status: int = 400,
        framing: bool = False,
    ) -> None:
        super().__init__(message)
        self.header = header
        self.status = status
        self.framing = framing


class SdpError(RemoteError, ValueError):
    """An SDP body could not be parsed or negotiated."""


class RtpError(RemoteError, ValueError):
    """An RTP or RTCP packet could not be parsed."""


class CodecError(RemoteError, ValueError):
    """An encoded media payload could not be decoded."""


class CallStateConflict(RemoteError):
    """A control request (transfer, takeover, hand-back) came for a call in a state that does
    not allow it; nothing was changed. ``state`` is the call's current state, ``action`` what
    was asked (the HTTP API answers 409 ``wrong_state`` with both)."""

    def __init__(self, call_id: str, state: str, action: str, *, owner: str | None = None) -> None:
        held = f" (held by {owner})" if owner else ""
        super().__init__(f"call {call_id} is {state}{held}: cannot {action}")
        self.call_id = call_id
        self.state = state
        self.action = action
        self.owner = owner
        """The human who holds the call, when one does."""


class AuthError(RemoteError):
    """Credentials were missing or wrong."""


# --- local -------------------------------------------------------------------------------


class ConfigError(LocalError, ValueError):
    """Configuration is invalid; ``key`` names the bad setting."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidTransition(LocalError):
    """A state machine was asked for a transition its table does not allow."""

    def __init__(self, machine: str, state: str, event: str) -> None:
        super().__init__(f"{machine}: no transition from {state!r} on {event!r}")
        self.machine = machine
        self.state = state
        self.event = event


class ResourceExhausted(LocalError):
    """A bounded resource (RTP ports, call slots) is used up."""


class StateUnavailable(LocalError):
    """The shared state (Redis at ``state.redis_url``) cannot be reached; ``url`` names it
    (without its password)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach Redis at {url}: {reason}")
        self.url = url

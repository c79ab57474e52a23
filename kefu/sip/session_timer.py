"""SIP session timers (RFC 4028): header values, negotiation, and a sans-IO keep-alive timer.

Invariants of :class:`SessionTimer`:

* exactly one deadline is pending while the session is running: the refresh time when we
  are the refresher and have not yet been told to refresh, otherwise the expiry time;
* the expiry time is always ``last_refresh + interval - min(32, interval / 3)`` (§10: the
  side that notices expiry sends BYE a little before the peer would);
* once :class:`SessionExpired` has been emitted the timer is dead (``get_timer() is None``)
  until :meth:`SessionTimer.refreshed` is called, which is illegal after expiry.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from kefu.errors import InvalidTransition, SipParseError

if TYPE_CHECKING:
    from kefu.sip.message import Request

__all__ = [
    "ABSOLUTE_MIN_SE",
    "MinSE",
    "RefreshDue",
    "Refresher",
    "SessionExpired",
    "SessionExpires",
    "SessionTimer",
    "TimerEvent",
    "UasNegotiation",
    "negotiate_request",
    "negotiate_uas",
    "uac_outcome",
]

ABSOLUTE_MIN_SE = 90
"""RFC 4028 §4: no Session-Expires or Min-SE may be below 90 seconds."""


class Refresher(StrEnum):
    """Who sends the refresh (RFC 4028 §4 ``refresher-param``)."""

    UAC = "uac"
    UAS = "uas"


def _delta(raw: str, header: str) -> int:
    raw = raw.strip()
    if not raw.isdigit() or len(raw) > 10:
        raise SipParseError(f"{header}: bad delta-seconds {raw!r}", header=header)
    return int(raw)


def _split_params(value: str, header: str) -> tuple[str, list[tuple[str, str | None]]]:
    head, *rest = value.split(";")
    params: list[tuple[str, str | None]] = []
    for p in rest:
        p = p.strip()
        if not p:
            raise SipParseError(f"{header}: empty parameter", header=header)
        k, eq, v = p.partition("=")
        params.append((k.strip().lower(), v.strip() if eq else None))
    return head, params


@dataclass(frozen=True, slots=True)
class SessionExpires:
    """The ``Session-Expires`` header (RFC 4028 §4)."""

    delta: int
    """Session interval in seconds (RFC 4028 §4 ``delta-seconds``)."""
    refresher: Refresher | None = None
    """Which side refreshes; absent lets the UAS choose (RFC 4028 §4, §9)."""
    params: tuple[tuple[str, str | None], ...] = ()
    """Other ``se-params`` extensions, kept in order (RFC 4028 §4 ``generic-param``)."""

    @classmethod
    def parse(cls, value: str) -> SessionExpires:
        h = "Session-Expires"
        head, params = _split_params(value, h)
        delta = _delta(head, h)
        refresher: Refresher | None = None
        others: list[tuple[str, str | None]] = []
        for k, v in params:
            if k == "refresher":
                if v is None or v.lower() not in ("uac", "uas"):
                    raise SipParseError(f"{h}: bad refresher {v!r}", header=h)
                refresher = Refresher(v.lower())
            else:
                others.append((k, v))
        return cls(delta, refresher, tuple(others))

    def __str__(self) -> str:
        out = str(self.delta)
        if self.refresher is not None:
            out += f";refresher={self.refresher.value}"
        for k, v in self.params:
            out += f";{k}" if v is None else f";{k}={v}"
        return out


@dataclass(frozen=True, slots=True)
class MinSE:
    """The ``Min-SE`` header (RFC 4028 §5)."""

    delta: int
    """Smallest session interval the sender accepts, in seconds (RFC 4028 §5)."""

    @classmethod
    def parse(cls, value: str) -> MinSE:
        head, _params = _split_params(value, "Min-SE")
        return cls(_delta(head, "Min-SE"))

    def __str__(self) -> str:
        return str(self.delta)


@dataclass(frozen=True, slots=True)
class UasNegotiation:
    """What a UAS answers to a session-refresh request (RFC 4028 §9)."""

    status: int
    """200 to accept, 422 when the requested interval is below our minimum (RFC 4028 §6)."""
    headers: tuple[tuple[str, str], ...]
    """Headers to add to the response: Session-Expires and Require, or Min-SE for 422."""
    session_expires: SessionExpires | None
    """The agreed interval and refresher; None on 422 or when no timer runs (§9)."""

    @property
    def we_refresh(self) -> bool:
        """True when the UAS (us) must send the refreshes."""
        se = self.session_expires
        return se is not None and se.refresher is Refresher.UAS


def negotiate_uas(
    session_expires: str | None,
    min_se: str | None,
    supported: Iterable[str],
    *,
    our_min_se: int = ABSOLUTE_MIN_SE,
    preferred_interval: int | None = None,
    prefer_refresher: Refresher = Refresher.UAC,
) -> UasNegotiation:
    """Decide the session timer for an incoming INVITE/UPDATE (RFC 4028 §9).

    ``session_expires``/``min_se`` are the request's raw header values (None when absent);
    ``supported`` its Supported option tags. ``preferred_interval`` lets us ask for a timer
    when the UAC did not, and lowers a larger requested interval (never below Min-SE).
    Raises SipParseError for a malformed header (answer 400).
    """
    if our_min_se < ABSOLUTE_MIN_SE:
        raise ValueError(f"our Min-SE {our_min_se} is below the RFC 4028 floor of 90")
    uac_timer = any(tag.strip().lower() == "timer" for tag in supported)
    req_min = MinSE.parse(min_se).delta if min_se is not None else ABSOLUTE_MIN_SE
    floor = max(req_min, our_min_se)
    if session_expires is not None:
        se = SessionExpires.parse(session_expires)
        if se.delta < our_min_se:
            return UasNegotiation(422, (("Min-SE", str(our_min_se)),), None)
        delta = se.delta
        if preferred_interval is not None and preferred_interval < delta:
            delta = max(preferred_interval, floor)
        refresher = se.refresher
    elif preferred_interval is not None:
        delta = max(preferred_interval, floor)
        refresher = None
    else:
        return UasNegotiation(200, (), None)
    if refresher is None:
        # A UAC without timer support cannot refresh, so we must (RFC 4028 §9).
        refresher = prefer_refresher if uac_timer else Refresher.UAS
    agreed = SessionExpires(delta, refresher)
    headers: list[tuple[str, str]] = [("Session-Expires", str(agreed))]
    if uac_timer:
        headers.append(("Require", "timer"))
    return UasNegotiation(200, tuple(headers), agreed)


def negotiate_request(
    request: Request,
    *,
    our_min_se: int = ABSOLUTE_MIN_SE,
    preferred_interval: int | None = None,
    prefer_refresher: Refresher = Refresher.UAC,
) -> UasNegotiation:
    """:func:`negotiate_uas` on a parsed INVITE/UPDATE."""
    h = request.headers
    return negotiate_uas(
        h.get("Session-Expires"),
        h.get("Min-SE"),
        h.get_all("Supported"),
        our_min_se=our_min_se,
        preferred_interval=preferred_interval,
        prefer_refresher=prefer_refresher,
    )


def uac_outcome(
    status: int,
    session_expires: str | None,
    min_se: str | None,
    *,
    requested: int | None,
) -> SessionExpires | int | None:
    """Interpret the response to our INVITE/UPDATE as UAC (RFC 4028 §7.2, §7.4).

    Returns the agreed SessionExpires for a 2xx (refresher defaulting to the UAC per §7.2
    when the UAS used timers without naming one), None when no timer runs, or for a 422 the
    new interval (int) to retry with: the larger of the 422's Min-SE and our last request.
    """
    if status == 422:
        if min_se is None:
            raise SipParseError("422 without Min-SE", header="Min-SE")
        return max(MinSE.parse(min_se).delta, requested or 0)
    if not 200 <= status < 300 or session_expires is None:
        return None
    se = SessionExpires.parse(session_expires)
    if se.refresher is None:
        se = SessionExpires(se.delta, Refresher.UAC, se.params)
    return se


# --- the sans-IO timer ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RefreshDue:
    """Send a refreshing re-INVITE or UPDATE now (RFC 4028 §10, half the interval)."""

    at: float
    """The `now` at which the refresh fell due."""


@dataclass(frozen=True, slots=True)
class SessionExpired:
    """No refresh arrived in time: send BYE (RFC 4028 §10)."""

    at: float
    """The `now` at which expiry was detected."""


TimerEvent = RefreshDue | SessionExpired


class _Phase(StrEnum):
    WAIT_REFRESH = "wait_refresh"  # we are refresher, half-interval not reached
    WAIT_EXPIRY = "wait_expiry"  # waiting for a refresh (ours or the peer's) to land
    EXPIRED = "expired"


# (phase, event) -> next phase; events are "refresh_due", "expire", "refreshed".
_TABLE: dict[tuple[_Phase, str], _Phase] = {
    (_Phase.WAIT_REFRESH, "refresh_due"): _Phase.WAIT_EXPIRY,
    (_Phase.WAIT_REFRESH, "refreshed"): _Phase.WAIT_REFRESH,
    (_Phase.WAIT_EXPIRY, "expire"): _Phase.EXPIRED,
    (_Phase.WAIT_EXPIRY, "refreshed"): _Phase.WAIT_EXPIRY,
}


class SessionTimer:
    """Tracks one dialog's session interval; the TU feeds it successful refreshes.

    ``we_refresh`` says whether we send the refreshes. Call :meth:`refreshed` whenever a
    refreshing transaction succeeds (a 2xx to a re-INVITE/UPDATE in either direction),
    possibly with a newly negotiated interval/refresher.
    """

    def __init__(self, interval: int, we_refresh: bool, now: float) -> None:
        self._events: deque[TimerEvent] = deque()
        self._phase = _Phase.WAIT_REFRESH if we_refresh else _Phase.WAIT_EXPIRY
        self._set(interval, we_refresh, now)

    def _set(self, interval: int, we_refresh: bool, now: float) -> None:
        if interval <= 0:
            raise ValueError("session interval must be positive")
        self.interval = interval
        self.we_refresh = we_refresh
        self._refresh_at = now + interval / 2
        self._expire_at = now + interval - min(32.0, interval / 3)

    def _go(self, event: str) -> None:
        nxt = _TABLE.get((self._phase, event))
        if nxt is None:
            raise InvalidTransition("SessionTimer", self._phase.value, event)
        self._phase = nxt

    @property
    def expired(self) -> bool:
        return self._phase is _Phase.EXPIRED

    def refreshed(
        self, now: float, interval: int | None = None, we_refresh: bool | None = None
    ) -> None:
        """A refresh succeeded at ``now``; restart the interval (RFC 4028 §10)."""
        if self._phase is _Phase.EXPIRED:
            raise InvalidTransition("SessionTimer", self._phase.value, "refreshed")
        self._set(
            interval if interval is not None else self.interval,
            self.we_refresh if we_refresh is None else we_refresh,
            now,
        )
        self._go("refreshed")
        self._phase = _Phase.WAIT_REFRESH if self.we_refresh else _Phase.WAIT_EXPIRY

    def get_timer(self) -> float | None:
        if self._phase is _Phase.WAIT_REFRESH:
            return self._refresh_at
        if self._phase is _Phase.WAIT_EXPIRY:
            return self._expire_at
        return None

    def handle_timer(self, now: float) -> None:
        if self._phase is _Phase.WAIT_REFRESH and now >= self._refresh_at:
            self._go("refresh_due")
            self._events.append(RefreshDue(now))
        if self._phase is _Phase.WAIT_EXPIRY and now >= self._expire_at:
            self._go("expire")
            self._events.append(SessionExpired(now))

    def next_event(self) -> TimerEvent | None:
        return self._events.popleft() if self._events else None

"""Per-source admission before parsing, sans-IO: what Kamailio's ``pike`` module does.

The transport asks :meth:`SourceGate.check` about every datagram or framed TCP message,
passing the raw bytes, the source IP and ``now``; the answer is ``None`` (let it through to
the user agent) or the reason it is dropped. Nothing is parsed: the check costs a dict
lookup, a little arithmetic and, for INVITEs, a prefix test.

Two rules, for sources outside ``exempt``:

1. a token bucket per source IP: ``rate`` messages per second on average, ``burst`` at once;
   the excess is dropped (reason ``rate_limited``);
2. a source the application has put on hold (:meth:`SourceGate.hold`: too many calls it
   answered and the source has not ACKed) has its new INVITEs dropped until the hold ends
   (reason ``source_held``); everything else from it still passes, so its ACKs and BYEs
   release the hold.

Memory is bounded: at most ``max_sources`` sources are remembered, the least recently seen
is forgotten first. A forgotten source starts again with a full bucket.

Drops are counted per reason (a fixed set, safe as a metric label); :meth:`take_log`
says, at most once per ``log_interval`` per source, how many of its messages were dropped
since it last said so, so a flood costs one log line per interval, not one per datagram.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict
from dataclasses import dataclass

from kefu.sip.uri import in_networks

__all__ = ["DROP_REASONS", "AdmissionLimits", "SourceGate"]

DROP_REASONS = ("rate_limited", "source_held")
"""Every reason :meth:`SourceGate.check` can return (bounded metric label set)."""


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """How much one source may send before kefu parses it (config ``sip.rate_*``)."""

    rate: float = 500.0
    """Messages per second per source IP, averaged; 0 turns the bucket off. A trunk placing
    100 calls/s sends about 300 (INVITE, ACK, BYE)."""
    burst: float = 1000.0
    """Bucket size: messages a source may send at once after being quiet."""
    exempt: tuple[str, ...] = ()
    """Source networks (CIDR) never limited: large trunks, the Kamailio front."""
    max_sources: int = 4096
    """Sources remembered at once; the least recently seen is forgotten first."""
    log_interval: float = 10.0
    """Seconds between two drop log lines for one source."""


class _Source:
    __slots__ = ("dropped", "exempt", "held_until", "logged_at", "stamp", "tokens")

    def __init__(self, tokens: float, now: float, exempt: bool) -> None:
        self.tokens = tokens
        self.stamp = now
        self.exempt = exempt
        self.held_until = 0.0
        self.dropped = 0
        self.logged_at = float("-inf")


class SourceGate:
    """Token bucket and hold list per source IP; see the module docstring."""

    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self._exempt = [ipaddress.ip_network(n, strict=False) for n in self.limits.exempt]
        self._sources: OrderedDict[str, _Source] = OrderedDict()
        self.drops: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        """Messages dropped so far, by reason."""

    def __len__(self) -> int:
        return len(self._sources)

    def exempt(self, host: str) -> bool:
        """Whether ``host`` is in ``exempt`` (never limited)."""
        return bool(self._exempt) and in_networks(host, self._exempt)

    def _source(self, host: str, now: float) -> _Source:
        source = self._sources.get(host)
        if source is None:
            while len(self._sources) >= self.limits.max_sources:
                self._sources.popitem(last=False)
            source = _Source(self.limits.burst, now, self.exempt(host))
            self._sources[host] = source
        else:
            self._sources.move_to_end(host)
        return source

    def check(self, data: bytes, host: str, now: float) -> str | None:
        """None to let ``data`` from ``host`` through, else the reason it is dropped."""
        source = self._source(host, now)
        if source.exempt:
            return None
        limits = self.limits
        if limits.rate > 0:
            elapsed = now - source.stamp
            source.stamp = now
            if elapsed > 0:
                source.tokens = min(limits.burst, source.tokens + elapsed * limits.rate)
            if source.tokens < 1.0:
                return self._drop(source, "rate_limited")
            source.tokens -= 1.0
        if source.held_until > now and data.startswith(b"INVITE "):
            return self._drop(source, "source_held")
        return None

    def _drop(self, source: _Source, reason: str) -> str:
        source.dropped += 1
        self.drops[reason] += 1
        return reason

    def hold(self, host: str, until: float, now: float) -> None:
        """Drop new INVITEs from ``host`` until ``until`` (unless it is exempt)."""
        source = self._source(host, now)
        source.held_until = max(source.held_until, until)

    def held(self, host: str, now: float) -> bool:
        source = self._sources.get(host)
        return source is not None and source.held_until > now

    def take_log(self, host: str, now: float) -> int:
        """Drops from ``host`` to log now (0: nothing to log yet); resets its count."""
        source = self._sources.get(host)
        if source is None or not source.dropped:
            return 0
        if now - source.logged_at < self.limits.log_interval:
            return 0
        source.logged_at = now
        dropped, source.dropped = source.dropped, 0
        return dropped

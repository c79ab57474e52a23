"""The ``[trunk]`` section: how kefu places outbound calls (docs/trunk.md#outbound-calls).

Kept apart from :mod:`kefu.mediaserver.config`, which only holds the section and calls
:func:`check_trunk`. The password may come from the environment (``KEFU_TRUNK_PASSWORD``,
like every key) so it never needs to be in the TOML file.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kefu.errors import SipParseError
from kefu.sip.uri import SipUri

__all__ = ["TrunkConfig", "check_trunk", "proxy_address"]


@dataclass(frozen=True, slots=True)
class TrunkConfig:
    """Outbound calls through the call center's trunk (RFC 3261 §8.1.2, §22.2, §9.1)."""

    outbound_proxy: str = ""
    """``IP:PORT`` every outbound request goes to (the SBC / proxy); empty: straight to the
    called URI's host, which must then be an IP address. UDP."""
    from_user: str = "kefu"
    """The user part of kefu's From URI when a call gives none."""
    from_domain: str = ""
    """The host part of kefu's From URI; empty: ``sip.public_address``, else the SIP
    listen address."""
    display_name: str = ""
    """A display name for the From header (empty: none)."""
    username: str = ""
    """Digest user name for the trunk's 401/407 challenges; empty: a challenge fails the call."""
    password: str = ""
    """Digest password (prefer ``KEFU_TRUNK_PASSWORD`` to writing it in the file)."""
    ring_timeout: float = 60.0
    """Seconds an outbound call may ring unanswered before kefu sends CANCEL."""
    max_redirects: int = 3
    """3xx redirects followed per call (0: none)."""
    max_context_bytes: int = 4096
    """Largest ``context`` object a ``POST /api/calls`` may carry, as JSON."""


def proxy_address(text: str) -> tuple[str, int] | None:
    """``IP:PORT`` (``[v6]:PORT``) as (host, port); None when empty; ValueError otherwise."""
    if not text:
        return None
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise ValueError(f"expected IP:PORT, got {text!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"host must be an IP address (kefu resolves no names): {host!r}") from None
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"bad port {port_text!r}")
    return host, int(port_text)


def check_trunk(trunk: TrunkConfig) -> tuple[str, str] | None:
    """(key, problem) for the first bad ``trunk.*`` value, or None."""
    try:
        proxy_address(trunk.outbound_proxy)
    except ValueError as exc:
        return "trunk.outbound_proxy", f"trunk.outbound_proxy: {exc}"
    if trunk.ring_timeout <= 0:
        return "trunk.ring_timeout", "trunk.ring_timeout must be above 0"
    if not trunk.from_user or any(c in trunk.from_user for c in "@:;<> \r\n\"'"):
        return "trunk.from_user", f"trunk.from_user: not a SIP user: {trunk.from_user!r}"
    if trunk.from_domain:
        try:
            SipUri.parse(f"sip:{trunk.from_user}@{trunk.from_domain}")
        except SipParseError:
            return "trunk.from_domain", f"trunk.from_domain: not a host: {trunk.from_domain!r}"
    if any(c in trunk.display_name for c in '"\r\n\\'):
        return "trunk.display_name", "trunk.display_name may not hold quotes or line breaks"
    if trunk.password and not trunk.username:
        return "trunk.username", "trunk.password is set but trunk.username is empty"
    return None

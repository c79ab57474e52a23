"""The address a request really came from, behind trusted reverse proxies.

Behind a load balancer or an ingress every WebSocket and API request comes from the proxy's
address, so per-IP limits (connections per second, readers per IP) would count all callers
together. With ``http.trusted_proxies`` (networks), a request whose peer is one of them is
attributed to the address the proxies recorded in ``X-Forwarded-For``: the rightmost entry
not itself a trusted proxy (the leftmost entries are whatever the client claimed, and are not
believed). Without trusted proxies, or from any other peer, the header is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from aiohttp import web

__all__ = ["CLIENT_ADDRESS_KEY", "ClientAddress", "client_ip"]

FORWARDED_FOR = "X-Forwarded-For"
MAX_HOPS = 16
"""Entries of X-Forwarded-For looked at, from the right (a longer chain is not believed)."""


class ClientAddress:
    def __init__(self, trusted: Iterable[str] = ()) -> None:
        self.trusted = tuple(ipaddress.ip_network(n, strict=False) for n in trusted)

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.trusted)

    def of(self, request: web.BaseRequest) -> str:
        remote = request.remote or "unknown"
        if not self.trusted or not self._trusted(remote):
            return remote
        chain = ",".join(request.headers.getall(FORWARDED_FOR, []))
        hops = [hop.strip() for hop in chain.split(",") if hop.strip()]
        for hop in reversed(hops[-MAX_HOPS:]):
            try:
                ipaddress.ip_address(hop)
            except ValueError:
                return remote  # a garbled chain: the proxy is all we know
            if not self._trusted(hop):
                return hop
        return remote


CLIENT_ADDRESS_KEY = web.AppKey("kefu_client_address", ClientAddress)


def client_ip(request: web.BaseRequest) -> str:
    """The client's address (see the module); the peer's when the app trusts no proxy."""
    finder = request.app.get(CLIENT_ADDRESS_KEY) if isinstance(request, web.Request) else None
    return finder.of(request) if finder is not None else (request.remote or "unknown")

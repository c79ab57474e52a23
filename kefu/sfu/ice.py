"""The one seam over aioice: which local addresses become ICE host candidates.

Why a seam at all: aioice's ``Connection.gather_candidates`` asks the module-level function
``aioice.ice.get_host_addresses`` for every interface address and *always* drops 127.0.0.1
and ::1. kefu needs the opposite on two occasions: tests run inside a private network
namespace whose only interface is loopback, and operators want to pin host candidates to the
public interface of a multi-homed node (``webrtc.ice_host_addresses``). aioice has no option
for either, and aiortc creates its ``Connection`` objects deep inside ``RTCPeerConnection``.

How: :func:`install` wraps ``aioice.ice.get_host_addresses`` once (idempotently). The wrapper
consults a :class:`contextvars.ContextVar`; when it is unset the original function runs, so
every other aioice user in the process is unaffected. :func:`host_addresses` sets the variable
for the duration of an ``await pc.setLocalDescription(...)`` (aiortc gathers candidates inside
that call, in the calling task's context), which makes the restriction per peer connection
without touching aiortc. If aioice ever renames the function, :func:`install` raises at import
time of kefu.sfu rather than silently gathering the wrong addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import aioice.ice

# A ContextVar is not shared mutable state in the usual sense: each task sees its own value.
_ALLOWED: ContextVar[tuple[str, ...] | None] = ContextVar("kefu_ice_host_addresses", default=None)
_MARK = "_kefu_host_address_seam"


def _wrap(original: Callable[[bool, bool], list[str]]) -> Callable[..., list[str]]:
    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        allowed = _ALLOWED.get()
        if allowed is None:
            return original(use_ipv4, use_ipv6)
        chosen = []
        for address in allowed:
            version = ipaddress.ip_address(address).version
            if (version == 4 and use_ipv4) or (version == 6 and use_ipv6):
                chosen.append(address)
        return chosen

    setattr(get_host_addresses, _MARK, original)
    return get_host_addresses


def install() -> None:
    """Put the wrapper in place (safe to call any number of times)."""
    current: Any = getattr(aioice.ice, "get_host_addresses", None)
    if current is None:
        raise RuntimeError("aioice.ice.get_host_addresses is gone: kefu.sfu.ice needs updating")
    if not hasattr(current, _MARK):
        aioice.ice.get_host_addresses = _wrap(current)


def validate(addresses: Sequence[str]) -> tuple[str, ...]:
    """Check ``webrtc.ice_host_addresses`` entries are literal IP addresses."""
    out = []
    for address in addresses:
        try:
            out.append(str(ipaddress.ip_address(address)))
        except ValueError as exc:
            raise ValueError(f"ice_host_addresses: {address!r} is not an IP address") from exc
    return tuple(out)


@contextmanager
def host_addresses(addresses: Sequence[str] | None) -> Iterator[None]:
    """Within this block (this task), ICE gathers host candidates only on ``addresses``.

    ``None`` keeps aioice's own choice (every interface except loopback).
    """
    install()
    token = _ALLOWED.set(None if addresses is None else tuple(addresses))
    try:
        yield
    finally:
        _ALLOWED.reset(token)

"""RTP/RTCP port pairs (RFC 3550 §11: RTP on an even port, RTCP on the next odd one).

API CONTRACT:

    ports = PortAllocator(lo, hi)             # range [lo, hi], both inclusive
    port = ports.allocate() -> int            # even RTP port; port + 1 is its RTCP port
    ports.release(port)                       # give a pair back (unknown ports: ValueError)
    ports.in_use -> int; ports.capacity -> int
    await bind_pair(loop, host, ports, rtp_factory, rtcp_factory) -> BoundPair
        binds UDP on an allocated pair, skipping pairs another process holds;
        raises kefu.errors.ResourceExhausted when no pair can be bound.

Allocation is round-robin rather than lowest-free so that a pair released at the end of a
call is the last to be handed out again: late packets of the old call then reach a closed
port instead of the next caller.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass

from kefu.errors import ResourceExhausted


class PortAllocator:
    """Hands out even RTP ports (with port + 1 for RTCP) from a fixed range."""

    def __init__(self, lo: int, hi: int) -> None:
        first = lo + (lo % 2)
        if not 0 < lo <= hi <= 65535 or first + 1 > hi:
            raise ValueError(f"port range {lo}-{hi} holds no even/odd pair")
        self._first = first
        self._count = (hi - first + 1) // 2
        self._next = 0
        self._used: set[int] = set()

    @property
    def capacity(self) -> int:
        """How many RTP/RTCP pairs the range holds."""
        return self._count

    @property
    def in_use(self) -> int:
        return len(self._used)

    def allocate(self) -> int:
        """Return a free even port; raise ResourceExhausted when every pair is taken."""
        if len(self._used) >= self._count:
            raise ResourceExhausted(
                f"all {self._count} RTP port pairs in {self._first}-"
                f"{self._first + 2 * self._count - 1} are in use"
            )
        for _ in range(self._count):
            port = self._first + 2 * self._next
            self._next = (self._next + 1) % self._count
            if port not in self._used:
                self._used.add(port)
                return port
        raise AssertionError("unreachable: a free pair exists but was not found")

    def release(self, port: int) -> None:
        """Return a pair; releasing a port not handed out is a bug in the caller."""
        try:
            self._used.remove(port)
        except KeyError:
            raise ValueError(f"port {port} was not allocated") from None


@dataclass(frozen=True, slots=True)
class BoundPair:
    """The transports bound by bind_pair()."""

    port: int
    """The even RTP port (allocated from the PortAllocator)."""
    rtp: asyncio.DatagramTransport
    """Transport bound on port."""
    rtp_protocol: asyncio.DatagramProtocol
    """Protocol instance serving rtp."""
    rtcp: asyncio.DatagramTransport
    """Transport bound on port + 1."""
    rtcp_protocol: asyncio.DatagramProtocol
    """Protocol instance serving rtcp."""


_BIND_BUSY = {errno.EADDRINUSE, errno.EACCES}


async def bind_pair(
    loop: asyncio.AbstractEventLoop,
    host: str,
    ports: PortAllocator,
    rtp_factory: Callable[[], asyncio.DatagramProtocol],
    rtcp_factory: Callable[[], asyncio.DatagramProtocol],
) -> BoundPair:
    """Bind RTP and RTCP sockets on the next pair no other process holds."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(ports.capacity):
        port = ports.allocate()
        rtp_transport: asyncio.DatagramTransport | None = None
        try:
            rtp_transport, rtp_protocol = await loop.create_datagram_endpoint(
                rtp_factory, local_addr=(host, port), family=family
            )
            rtcp_transport, rtcp_protocol = await loop.create_datagram_endpoint(
                rtcp_factory, local_addr=(host, port + 1), family=family
            )
        except OSError as exc:
            if rtp_transport is not None:
                rtp_transport.close()
            ports.release(port)
            if exc.errno not in _BIND_BUSY:
                raise
            continue
        return BoundPair(port, rtp_transport, rtp_protocol, rtcp_transport, rtcp_protocol)
    raise ResourceExhausted(f"no RTP port pair could be bound on {host}")

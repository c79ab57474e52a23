"""Port pairs (RFC 3550 §11) and binding around ports other processes hold."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kefu.errors import LocalError, ResourceExhausted
from kefu.rtp.ports import PortAllocator, bind_pair


def test_even_ports_round_robin_and_exhaustion() -> None:
    ports = PortAllocator(10001, 10008)  # pairs 10002, 10004, 10006 (10008 has no 10009)
    assert ports.capacity == 3
    got = [ports.allocate() for _ in range(3)]
    assert got == [10002, 10004, 10006]
    with pytest.raises(ResourceExhausted) as info:
        ports.allocate()
    assert isinstance(info.value, LocalError)
    ports.release(10004)
    assert ports.allocate() == 10004
    assert ports.in_use == 3


def test_released_port_is_reused_last() -> None:
    ports = PortAllocator(20000, 20009)
    first = ports.allocate()
    ports.release(first)
    assert [ports.allocate() for _ in range(5)] == [20002, 20004, 20006, 20008, 20000]


def test_release_unknown_port_is_an_error() -> None:
    ports = PortAllocator(20000, 20009)
    with pytest.raises(ValueError, match="not allocated"):
        ports.release(20000)


def test_bad_range() -> None:
    with pytest.raises(ValueError):
        PortAllocator(20001, 20001)
    with pytest.raises(ValueError):
        PortAllocator(30000, 20000)


@pytest.mark.netns
async def test_bind_pair_skips_ports_held_elsewhere() -> None:
    loop = asyncio.get_running_loop()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind(("127.0.0.1", 39001))  # the RTCP half of the first pair
    try:
        ports = PortAllocator(39000, 39005)
        pair = await bind_pair(
            loop, "127.0.0.1", ports, asyncio.DatagramProtocol, asyncio.DatagramProtocol
        )
        assert pair.port == 39002
        assert ports.in_use == 1
        assert pair.rtcp.get_extra_info("sockname")[1] == 39003
        pair.rtp.close()
        pair.rtcp.close()
        ports.release(pair.port)
        squatter2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        squatter2.bind(("127.0.0.1", 39004))
        try:
            small = PortAllocator(39000, 39001)
            with pytest.raises(ResourceExhausted):
                await bind_pair(
                    loop, "127.0.0.1", small, asyncio.DatagramProtocol, asyncio.DatagramProtocol
                )
            assert small.in_use == 0
        finally:
            squatter2.close()
    finally:
        squatter.close()

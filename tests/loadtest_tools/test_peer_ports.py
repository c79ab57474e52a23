"""loadtest.peers.take_ports: reserved ports for peer processes (docs/TESTING.md, "Ports")."""

from __future__ import annotations

import socket

import pytest

from loadtest import peers
from loadtest.peers import PEER_PORTS, PortPool, PortsUnsafe


@pytest.fixture
def private(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend to be inside ``unshare -n`` (only ``lo``), whatever the host is."""
    monkeypatch.setattr(peers, "_only_loopback", lambda: True)


def test_ports_are_handed_out_once_in_order_and_aligned(private: None) -> None:
    pool = PortPool(16000, 16019)
    assert pool.take() == 16000
    assert pool.take(4, even=True) == 16002  # 16001 skipped: an RTP block starts even
    assert pool.take() == 16006
    assert pool.take(2, even=True) == 16008
    assert pool.take(10) == 16010
    with pytest.raises(RuntimeError, match="all handed out"):
        pool.take()


@pytest.mark.netns
def test_a_port_something_bound_is_skipped(private: None) -> None:
    pool = PortPool(*PEER_PORTS)
    first = pool.take(2, even=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", first + 3))  # the RTCP half of the next even pair
        block = pool.take(2, even=True)
    assert block == first + 4


def test_the_reserved_range_is_outside_kefus_rtp_and_the_ephemeral_range(private: None) -> None:
    PortPool(*PEER_PORTS).take()  # the real range passes the check on this kernel
    with pytest.raises(PortsUnsafe, match="ephemeral"):
        PortPool(40000, 40010).take()
    with pytest.raises(PortsUnsafe, match="kefu's default RTP"):
        PortPool(19990, 20010).take()


def test_outside_a_private_namespace_it_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "_only_loopback", lambda: False)
    monkeypatch.delenv(peers.ANYWHERE_ENV, raising=False)
    with pytest.raises(PortsUnsafe, match="unshare -n"):
        PortPool(*PEER_PORTS).take()
    monkeypatch.setenv(peers.ANYWHERE_ENV, "1")  # the benchmarks' explicit best effort
    assert PEER_PORTS[0] <= PortPool(*PEER_PORTS).take() <= PEER_PORTS[1]

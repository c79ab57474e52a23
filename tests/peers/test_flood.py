"""Floods from one address inside ``allow_from`` do not crowd out the legitimate trunk.

A ``kefu serve`` process in echo mode; a flooder on 127.0.0.2 sends 2000 INVITEs/s that it
never ACKs (a fresh Call-ID and a valid offer each), then 2000 garbage datagrams/s, for a
few seconds each, while a trunk on 127.0.0.1 places calls and pings OPTIONS. The long
version is ``python -m loadtest flood`` (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadtest.flood import flood_round
from tests.conftest import start_kefu

pytestmark = pytest.mark.netns


def test_invite_and_garbage_floods_leave_legit_calls_and_options_answered(
    tmp_path: Path,
) -> None:
    server = start_kefu(tmp_path)
    target = (server.sip_host, server.sip_port)
    try:
        invites = asyncio.run(
            flood_round(target, "invite", rate=2000, seconds=5, cps=20, options_rate=10, hold=0.5)
        )
        assert invites.flood["sent"] >= 5000
        assert invites.legit_calls >= 90
        assert invites.answered_pct >= 99.0, invites.legit_statuses
        assert invites.options_pct >= 99.0
        # The flooder holds no more than its cap of unACKed calls; the rest were refused
        # or dropped before parsing.
        unacked_cap = 50
        assert server.metric("kefu_active_calls") <= unacked_cap
        assert server.metric("kefu_calls_total", 'result="rejected_unacked"') >= 1
        held = server.metric("kefu_sip_dropped_total", 'reason="source_held"')
        limited = server.metric("kefu_sip_dropped_total", 'reason="rate_limited"')
        assert held + limited >= invites.flood["sent"] - 2 * unacked_cap - 100

        garbage = asyncio.run(
            flood_round(target, "garbage", rate=2000, seconds=5, cps=20, options_rate=10, hold=0.5)
        )
        assert garbage.flood["sent"] >= 5000
        assert garbage.options_pct >= 99.0
        assert garbage.answered_pct >= 99.0, garbage.legit_statuses
        # kefu logged the drops once per interval, not once per datagram.
        limited_lines = server.events("sip_source_limited")
        assert 1 <= len(limited_lines) <= 10
    finally:
        server.stop()

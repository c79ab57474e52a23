"""Attacks on the call-control side of a running server: hostile transfer targets, invented
SIP methods as metric labels, and teardown steps that fail.

The server runs in-process on loopback; the trunk is the scripted UDP peer of
test_server_echo.py.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import structlog
from aiortc.mediastreams import AudioStreamTrack

from kefu.errors import CallStateConflict
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.events import CallStateChanged
from kefu.mediaserver.server import KefuServer, transfer_target
from kefu.sip.message import Request, parse_message
from tests.mediaserver.test_server_echo import Trunk, server, sip, trunk_socket

pytestmark = pytest.mark.netns

__all__ = ["server"]  # the fixture, shared with test_server_echo.py


async def answered_call(server: KefuServer, trunk: Trunk, call_id: str) -> tuple[Call, str]:
    port = server.sip_address[1]
    trunk.transport.sendto(sip("INVITE", port, 40000, call_id=call_id), server.sip_address)
    ok = await trunk.expect(200)
    tag = ok.to.tag or ""
    ack = sip("ACK", port, to_tag=tag, branch="z9hG4bK-ack", call_id=call_id)
    trunk.transport.sendto(ack, server.sip_address)
    (call,) = [c for c in server.calls.values() if c.state is CallState.AI_ACTIVE]
    return call, tag


async def next_request(trunk: Trunk, method: str, wait: float = 3.0) -> Request:
    while True:
        data = await asyncio.wait_for(trunk.inbox.get(), wait)
        if isinstance(data, bytes):
            msg = parse_message(data)
            if isinstance(msg, Request) and msg.method == method:
                return msg


@pytest.mark.parametrize(
    "target",
    [
        "sip:queue@vcc\r\nX-Evil: 1",
        "sip:queue@vcc\nContact: <sip:x@y>",
        "sip:queue@vcc\r",
        " sip:queue@vcc",
        "<sip:queue@vcc>",
        "http://example.com/",
        "not a uri",
        "",
    ],
)
def test_hostile_transfer_targets_are_refused(target: str) -> None:
    with pytest.raises(ValueError):
        transfer_target(target)


def test_plain_targets_pass_unchanged() -> None:
    for target in ("sip:queue@vcc", "sips:agent@10.0.0.1:5061;transport=tls", "tel:+4930123"):
        assert transfer_target(target) == target


async def test_a_phone_call_passed_to_a_colleague_stays_with_a_human(server: KefuServer) -> None:
    trunk = await trunk_socket()
    call, _ = await answered_call(server, trunk, "assign-1")
    assert await server.listen(call.id, "ann") == {"room": f"call:{call.id}"}
    sfu, room = server.rooms.sfu, f"call:{call.id}"
    bob = await sfu.join_local(room, "a-bob", "agent", AudioStreamTrack(), user="bob")
    ann = await sfu.join_local(room, "a-ann", "agent", AudioStreamTrack(), user="ann")
    assert bob.source is not None and ann.source is not None
    assert (bob.source.muted, ann.source.muted) == (True, True)  # both listen, silently
    assert await server.takeover(call.id, "bob") == {"room": f"call:{call.id}"}
    assert (bob.source.muted, ann.source.muted) == (False, True)  # the caller hears bob only
    assert await server.control.assign(call.id, "bob", "ann") == {"owner": "ann"}
    assert (call.state, call.owner) == (CallState.HUMAN_ACTIVE, "ann")
    assert (bob.source.muted, ann.source.muted) == (True, False)
    # Ann's takeover joins the call's agent room and changes nothing else; Bob's is refused.
    assert await server.takeover(call.id, "ann") == {"room": f"call:{call.id}"}
    with pytest.raises(CallStateConflict) as info:
        await server.takeover(call.id, "bob")
    assert info.value.owner == "ann" and call.state is CallState.HUMAN_ACTIVE
    with pytest.raises(CallStateConflict):
        await server.control.assign(call.id, "bob", "bob")  # no longer his to pass on
    for act in (
        lambda: server.control.transfer(call.id, "sip:queue@vcc", "bob", supervisor=False),
        lambda: server.control.hangup(call.id, "bob", supervisor=False),
    ):
        with pytest.raises(CallStateConflict) as info:
            act()  # bob no longer holds it: not his to transfer or hang up
        assert info.value.owner == "ann" and call.state is CallState.HUMAN_ACTIVE
    with pytest.raises(CallStateConflict):
        await server.control.handback(call.id, "bob", supervisor=False)
    await server.handback(call.id, "ann")
    with pytest.raises(CallStateConflict) as info:
        await server.control.assign(call.id, "ann", "bob", supervisor=True)  # the AI has it
    assert info.value.state == "ai_active"


async def test_refused_transfer_leaves_the_call_where_it_was(server: KefuServer) -> None:
    trunk = await trunk_socket()
    call, _ = await answered_call(server, trunk, "xfer-1")
    with pytest.raises(ValueError, match="control characters"):
        server.transfer(call.id, "sip:queue@vcc\r\nX-Evil: 1")
    assert call.state is CallState.AI_ACTIVE
    assert call.transfer_target is None
    # The call can still be transferred, and the REFER names exactly the target asked for.
    server.transfer(call.id, "sip:queue@vcc")
    assert call.state is CallState.TRANSFERRING
    refer = await next_request(trunk, "REFER")
    assert refer.headers.get("Refer-To") in ("<sip:queue@vcc>", "sip:queue@vcc")
    assert "X-Evil" not in bytes(refer).decode()


async def test_invented_methods_share_one_metric_series(server: KefuServer) -> None:
    trunk = await trunk_socket()
    port = server.sip_address[1]
    for i in range(20):
        method = f"FOO{i}"
        trunk.transport.sendto(
            sip(method, port, branch=f"z9hG4bK-m{i}", call_id=f"m-{i}"), server.sip_address
        )
        response = await trunk.expect(501)
        assert response.cseq.method == method
    text = server.metrics_text().decode()
    labels = set(re.findall(r'kefu_sip_requests_total\{method="([^"]+)"\}', text))
    assert labels == {"other"}
    assert 'kefu_sip_requests_total{method="other"} 20.0' in text


async def test_a_failing_teardown_step_is_logged_and_the_rest_still_runs(
    server: KefuServer,
) -> None:
    trunk = await trunk_socket()
    call, tag = await answered_call(server, trunk, "teardown-1")

    class BrokenRoom:
        async def leave(self) -> None:
            raise RuntimeError("room went away")

    call.room = BrokenRoom()
    endpoint = call.endpoint
    assert endpoint is not None
    with structlog.testing.capture_logs() as logs:
        port = server.sip_address[1]
        bye = sip("BYE", port, cseq=2, to_tag=tag, branch="z9hG4bK-bye", call_id="teardown-1")
        trunk.transport.sendto(bye, server.sip_address)
        await trunk.expect(200)
        for _ in range(100):
            if not server.calls and server.ports.in_use == 0:
                break
            await asyncio.sleep(0.02)
    failed = [e for e in logs if e["event"] == "call_teardown_failed"]
    assert [e["part"] for e in failed] == ["room"]
    assert failed[0]["call_id"] == call.id
    # The RTP endpoint was still closed and its ports returned.
    assert server.ports.in_use == 0
    assert any(e["event"] == "call_ended" and e["call_id"] == call.id for e in logs)


def decline(request: Request, status: int = 603) -> bytes:
    """The trunk's final answer to ``request`` (a REFER it will not carry out)."""
    head = f"SIP/2.0 {status} Decline\r\n"
    for name in ("Via", "From", "To", "Call-ID", "CSeq"):
        head += f"{name}: {request.headers.get(name)}\r\n"
    return (head + "Content-Length: 0\r\n\r\n").encode()


async def test_takeover_then_a_refused_transfer_returns_the_call_to_the_human(
    server: KefuServer,
) -> None:
    trunk = await trunk_socket()
    call, _ = await answered_call(server, trunk, "takeover-1")
    with pytest.raises(CallStateConflict) as info:
        await server.handback(call.id)  # the AI has it already
    assert info.value.state == "ai_active" and call.state is CallState.AI_ACTIVE
    assert await server.takeover(call.id, "bob") == {"room": f"call:{call.id}"}
    assert call.state is CallState.HUMAN_ACTIVE and call.owner == "bob"
    with pytest.raises(CallStateConflict) as info:
        await server.takeover(call.id, "sue")
    assert info.value.owner == "bob" and call.owner == "bob"
    summary = (await server.list_calls())[0]
    assert (summary["room"], summary["owner"], summary["channel"]) == (
        f"call:{call.id}",
        "bob",
        "sip",
    )
    server.transfer(call.id, "sip:queue@vcc")
    assert call.state is CallState.TRANSFERRING
    with pytest.raises(CallStateConflict) as info:
        server.transfer(call.id, "sip:queue@vcc")  # one REFER at a time
    assert info.value.state == "transferring"
    refer = await next_request(trunk, "REFER")
    changes = server.bus.subscribe(lambda e: isinstance(e, CallStateChanged))
    trunk.transport.sendto(decline(refer), server.sip_address)
    change = await asyncio.wait_for(changes.queue.get(), 3.0)
    assert isinstance(change, CallStateChanged)
    assert (change.old, change.new, change.reason) == (
        "transferring",
        "human_active",  # back to the human, not to the AI
        "transfer failed: 603",
    )
    assert call.state is CallState.HUMAN_ACTIVE
    assert call.transfer_target == "sip:queue@vcc"
    await server.handback(call.id, "bob")
    assert call.state is CallState.AI_ACTIVE


async def test_an_agent_who_vanishes_gives_the_call_back_to_the_ai_after_the_grace(
    server: KefuServer,
) -> None:
    from dataclasses import replace

    from aiortc.mediastreams import AudioStreamTrack

    calls = replace(server.config.calls, agent_grace_s=0.3)
    server.config = replace(server.config, calls=calls)
    sfu = server.rooms.sfu
    trunk = await trunk_socket()
    call, _ = await answered_call(server, trunk, "grace-1")
    room = (await server.takeover(call.id, "ann"))["room"]
    ann = await sfu.join_local(room, "ann-browser", "agent", AudioStreamTrack(), display="Ann")
    changes = server.bus.subscribe(lambda e: isinstance(e, CallStateChanged))
    await ann.leave()
    await asyncio.sleep(0.1)
    assert call.state is CallState.HUMAN_ACTIVE  # still within the grace
    change = await asyncio.wait_for(changes.queue.get(), 3.0)
    assert isinstance(change, CallStateChanged)
    assert (change.old, change.new) == ("human_active", "ai_active")
    assert "connection was lost" in change.reason and call.owner is None

    # An agent whose browser comes back within the grace keeps the call.
    await server.takeover(call.id, "bob")
    bob = await sfu.join_local(room, "bob-1", "agent", AudioStreamTrack(), display="Bob")
    await bob.leave()
    await asyncio.sleep(0.1)
    again = await sfu.join_local(room, "bob-2", "agent", AudioStreamTrack(), display="Bob")
    await asyncio.sleep(0.5)
    assert call.state is CallState.HUMAN_ACTIVE and call.owner == "bob"
    await again.leave()


async def test_a_handoff_waits_for_a_signed_in_agent_and_transfers_when_nobody_is(
    server: KefuServer,
) -> None:
    from dataclasses import replace

    from kefu.mediaserver.events import AgentWait

    server.dispatch.config = replace(
        server.config, sip=replace(server.config.sip, transfer_target="sip:queue@vcc")
    )
    trunk = await trunk_socket()
    waits = server.bus.subscribe(lambda e: isinstance(e, AgentWait))

    # An agent is signed in: the call waits (no REFER), listed with waiting_since.
    server.agent_queue.agents_online = lambda: 1
    first, _ = await answered_call(server, trunk, "wait-1")
    server._handoff(first, "caller asked")
    wait = await asyncio.wait_for(waits.queue.get(), 3.0)
    assert isinstance(wait, AgentWait) and (wait.call_id, wait.waiting) == (first.id, True)
    (listed,) = await server.list_calls()
    assert listed["waiting_since"] is not None and first.state is CallState.AI_ACTIVE
    await server.takeover(first.id, "ann")  # any agent picks it: the wait is over
    done = await asyncio.wait_for(waits.queue.get(), 3.0)
    assert isinstance(done, AgentWait) and (done.waiting, done.outcome) == (False, "taken")
    assert (await server.list_calls())[0]["waiting_since"] is None
    with pytest.raises(asyncio.TimeoutError):
        await next_request(trunk, "REFER", wait=0.3)

    # Nobody signed in: the REFER goes out at once.
    server.agent_queue.agents_online = lambda: 0
    second, _ = await answered_call_in(server, trunk, "wait-2")
    server._handoff(second, "caller asked")
    refer = await next_request(trunk, "REFER")
    assert "queue@vcc" in (refer.headers.get("Refer-To") or "")
    assert second.state is CallState.TRANSFERRING


async def answered_call_in(server: KefuServer, trunk: Trunk, call_id: str) -> tuple[Call, str]:
    """Like answered_call, when other calls are up: the one this INVITE created."""
    before = set(server.calls)
    port = server.sip_address[1]
    invite = sip("INVITE", port, 40002, call_id=call_id, branch=f"z9hG4bK-{call_id}")
    trunk.transport.sendto(invite, server.sip_address)
    ok = await trunk.expect(200)
    tag = ok.to.tag or ""
    ack = sip("ACK", port, to_tag=tag, branch="z9hG4bK-ack2", call_id=call_id)
    trunk.transport.sendto(ack, server.sip_address)
    (leg,) = set(server.calls) - before
    return server.calls[leg], tag

"""Listening in is silent on the server: in a call's room only the agent holding the call is
heard, whatever a listener's browser sends. The SFU still receives every listener's packets
(they are alive) but forwards none of them until they hold the call."""

from __future__ import annotations

from typing import Any

from aiortc.mediastreams import AudioStreamTrack, MediaStreamTrack

from kefu.mediaserver.assign import assign
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.rooms import RoomService
from kefu.sfu.api import PeerSettings, Sfu
from kefu.sfu.forward import PacketSource
from tests.mediaserver.test_room_channel import PausableAgent, until


def sent(source: PacketSource | None) -> tuple[int, int]:
    """(packets forwarded to someone, packets held back) so far."""
    assert source is not None
    return source.stats.fanned_out, source.stats.muted


async def test_only_the_agent_holding_a_web_call_is_heard_in_its_room() -> None:
    bus = EventBus()
    rooms = RoomService(Sfu(PeerSettings()), bus=bus)

    def make_bot(room_id: str, hears: MediaStreamTrack, publish: Any) -> PausableAgent:
        return PausableAgent(publish)

    rooms.make_bot = make_bot
    await rooms.join("r1", "alice", role="customer")
    call = rooms.call("room:r1")
    sfu = rooms.sfu
    ann = await sfu.join_local("r1", "a-1", "agent", AudioStreamTrack(), user="ann")
    sue = await sfu.join_local("r1", "s-1", "supervisor", AudioStreamTrack(), user="sue")
    phone = await sfu.join_local("r1", "p-1", "sip", AudioStreamTrack())
    await until(lambda: all(sent(p.source)[1] >= 5 for p in (ann, sue)))
    # Both listen: nothing of theirs is forwarded; the caller's side always is.
    assert sent(ann.source)[0] == 0 and sent(sue.source)[0] == 0
    await until(lambda: sent(phone.source)[0] >= 5)

    call.takeover("ann")
    held_back = sent(sue.source)[1]
    await until(lambda: sent(ann.source)[0] >= 5)
    await until(lambda: sent(sue.source)[1] >= held_back + 5)
    assert sent(sue.source)[0] == 0  # the supervisor still listens in silence

    bus.publish(assign(call, "ann", "sue"))  # ann passes the call to sue
    assert ann.source is not None and sue.source is not None
    assert (ann.source.muted, sue.source.muted) == (True, False)
    call.handback("sue")
    assert (ann.source.muted, sue.source.muted) == (True, True)
    # A listener who joins after the takeover starts muted too.
    call.takeover("ann")
    lee = await sfu.join_local("r1", "s-2", "supervisor", AudioStreamTrack(), user="lee")
    await until(lambda: sent(lee.source)[1] >= 3)
    assert sent(lee.source)[0] == 0 and ann.source.muted is False
    await rooms.close()

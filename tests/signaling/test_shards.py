"""Room sharding, the routing half: which process reads a socket, from its first message."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kefu.signaling.shards import FRONT, ShardRouter, shard_of


def join(room: str) -> str:
    return json.dumps({"v": 1, "type": "join", "room": room})


def resume(session: str) -> str:
    return json.dumps({"v": 1, "type": "resume", "session": session, "token": "t"})


def joined(session: str) -> str:
    return json.dumps({"v": 1, "type": "joined", "session": session, "participant": "c-1"})


def test_placement_is_pinned_down() -> None:
    # Golden values: every process of a node, and the next release, must agree on these
    # (Python's own hash() is salted per process and would not).
    assert [shard_of(f"room-{i}", 2) for i in range(12)] == [1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1]
    assert shard_of("support-42", 4) == 1
    assert shard_of("support-42", 1) == FRONT


def test_rooms_spread_evenly_over_shards() -> None:
    counts = Counter(shard_of(f"room-{i}", 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert all(900 < n < 1100 for n in counts.values()), counts


def test_non_ascii_and_lone_surrogate_room_ids_hash() -> None:
    assert 0 <= shard_of("客服-1", 3) < 3
    assert 0 <= shard_of("\ud800", 3) < 3


def test_join_goes_to_the_rooms_shard_pinned_rooms_to_the_front() -> None:
    router = ShardRouter(4, pinned=frozenset({"sip"}))
    rooms = [f"r{i}" for i in range(50)]
    assert [router.route(join(r), 0.0) for r in rooms] == [shard_of(r, 4) for r in rooms]
    assert router.route(join("sip"), 0.0) == FRONT


def test_phone_calls_agent_rooms_live_in_the_front() -> None:
    router = ShardRouter(4, pinned_prefixes=("call:",))
    calls = [f"call:{i:016x}" for i in range(40)]
    assert {shard_of(c, 4) for c in calls} != {FRONT}  # a hash would spread them
    assert {router.route(join(c), 0.0) for c in calls} == {FRONT}
    assert router.route(join("callcenter"), 0.0) == shard_of("callcenter", 4)


@pytest.mark.parametrize(
    "message",
    ["not json", b"\xff\xfe", "[1, 2]", '{"type": "offer", "sdp": "v=0"}', '{"type": "ping"}'],
)
def test_messages_before_a_join_or_resume_decide_nothing(message: str | bytes) -> None:
    assert ShardRouter(3).route(message, 0.0) is None


@pytest.mark.parametrize(
    "message",
    [
        '{"type": "join"}',
        '{"type": "join", "room": 5}',
        '{"type": "resume", "session": "never-issued"}',
        '{"type": "resume"}',
    ],
)
def test_malformed_joins_and_unknown_resumes_are_answered_by_the_front(message: str) -> None:
    assert ShardRouter(3).route(message, 0.0) == FRONT


def test_resume_follows_the_session_while_relayed_and_for_the_grace_after() -> None:
    router = ShardRouter(3, resume_grace_s=20.0)
    assert router.note_reply(2, joined("s-1"), now=0.0) == "s-1"
    assert router.note_reply(2, '{"v":1,"type":"pong"}', now=0.0) is None
    assert router.route(resume("s-1"), 1000.0) == 2  # socket still relayed: no deadline
    router.released("s-1", now=1000.0)
    assert router.route(resume("s-1"), 1019.0) == 2
    assert router.route(resume("s-1"), 1021.0) == FRONT  # grace over: the front says unknown


def test_a_message_that_mentions_joined_without_being_one_is_not_a_session() -> None:
    router = ShardRouter(2)
    event = json.dumps({"v": 1, "type": "event", "event": {"type": "joined", "session": "x"}})
    assert router.note_reply(1, event, 0.0) is None
    assert router.session_count() == 0


def test_session_memory_is_bounded_forgetting_ended_sessions_first() -> None:
    router = ShardRouter(2, resume_grace_s=5.0, max_sessions=3)
    for i in range(3):
        router.note_reply(1, joined(f"s{i}"), 0.0)
    router.released("s0", 0.0)
    router.note_reply(1, joined("s3"), 10.0)  # s0's grace is over: it goes first
    assert router.session_count() == 3
    assert router.route(resume("s0"), 10.0) == FRONT
    for i in range(4, 8):
        router.note_reply(1, joined(f"s{i}"), 10.0)
    assert router.session_count() == 3
    assert router.route(resume("s7"), 10.0) == 1


def test_a_router_needs_a_shard() -> None:
    with pytest.raises(ValueError):
        ShardRouter(0)


def test_without_reports_a_new_room_goes_where_its_hash_says() -> None:
    router = ShardRouter(4)
    for i in range(20):
        assert router.route(join(f"room-{i}"), 0.0) == shard_of(f"room-{i}", 4)


def test_a_new_room_goes_to_the_shard_hosting_fewest_rooms() -> None:
    router = ShardRouter(3)
    router.observe(0, ["a", "b", "c"], 1.0)
    router.observe(1, ["d"], 1.0)
    router.observe(2, ["e", "f"], 1.0)
    assert router.route(join("new-1"), 1.5) == 1
    # new-1 counts for shard 1 until reported: now 1 and 2 hold two each, 0 holds three.
    assert router.route(join("new-2"), 1.6) in (1, 2)
    assert router.route(join("new-1"), 1.7) == 1  # a placed room stays put


def test_reported_rooms_stay_on_their_shard_and_closed_ones_are_forgotten() -> None:
    router = ShardRouter(2)
    busy = [f"r{i}" for i in range(5)]
    router.observe(0, busy, 1.0)
    router.observe(1, [], 1.0)
    assert all(router.route(join(r), 2.0) == 0 for r in busy)
    router.observe(0, [], 3.0)  # all closed
    router.observe(1, ["x", "y"], 3.0)
    assert router.route(join("r0"), 3.5) == 0  # now the emptier shard


def test_a_placement_never_reported_is_forgotten_after_the_grace() -> None:
    router = ShardRouter(2)
    router.observe(0, [], 0.0)
    router.observe(1, ["busy"], 0.0)
    assert router.route(join("refused"), 0.0) == 0
    router.observe(0, ["other"], 20.0)  # "refused" never opened
    router.observe(1, [], 20.0)
    assert router.route(join("refused"), 20.5) == 1


def test_pinned_rooms_ignore_load() -> None:
    router = ShardRouter(2, pinned=frozenset({"sip"}), pinned_prefixes=("call:",))
    router.observe(0, [f"r{i}" for i in range(9)], 0.0)
    router.observe(1, [], 0.0)
    assert router.route(join("sip"), 0.1) == FRONT
    assert router.route(join("call:abc"), 0.1) == FRONT

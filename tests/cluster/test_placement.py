"""Load-aware placement of new rooms (sans-IO)."""

from __future__ import annotations

from kefu.cluster.placement import choose_node, node_load
from kefu.cluster.registry import NodeInfo


def _node(id: str, calls: int = 0, rooms: int = 0, **kw: object) -> NodeInfo:
    return NodeInfo(id, f"http://{id}", id, calls=calls, rooms=rooms, max_calls=100,
                    max_rooms=10, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_the_least_loaded_node_takes_the_room() -> None:
    nodes = [_node("a", calls=50), _node("b", calls=10, rooms=1), _node("c", rooms=6)]
    assert choose_node(nodes) == "b"


def test_rooms_count_against_their_own_limit() -> None:
    # 5 of 10 rooms is fuller than 20 of 100 calls.
    assert node_load(_node("x", calls=20, rooms=5)) == 0.5
    assert choose_node([_node("x", calls=20, rooms=5), _node("y", calls=30)]) == "y"


def test_draining_and_full_nodes_take_nothing() -> None:
    nodes = [_node("a", draining=True), _node("b", rooms=10), _node("c", calls=100)]
    assert choose_node(nodes) is None
    assert choose_node([*nodes, _node("d", calls=99)]) == "d"


def test_rooms_just_placed_spread_a_burst() -> None:
    nodes = [_node("a"), _node("b")]
    placed: dict[str, int] = {}
    order = []
    for _ in range(6):
        chosen = choose_node(nodes, placed)
        assert chosen is not None
        order.append(chosen)
        placed[chosen] = placed.get(chosen, 0) + 1
    assert order.count("a") == order.count("b") == 3


def test_ties_go_to_the_same_node_everywhere() -> None:
    assert choose_node([_node("b"), _node("a")]) == "a"
    assert choose_node([]) is None

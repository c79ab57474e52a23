"""Which node takes a new room (sans-IO): the least loaded live node that is not draining.

A node's load is what its last heartbeat said (calls and rooms against its limits), plus
the rooms this node has itself placed there since that heartbeat, so a burst of new rooms
between two heartbeats is spread instead of all landing on the node that looked idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kefu.cluster.registry import NodeInfo

__all__ = ["choose_node", "node_load"]


def node_load(node: NodeInfo, placed_since: int = 0) -> float:
    """0 (idle) .. 1 (full): the fuller of its call slots and its room slots."""
    calls = node.calls / max(1, node.max_calls)
    rooms = (node.rooms + placed_since) / max(1, node.max_rooms)
    return max(calls, rooms)


def choose_node(nodes: Iterable[NodeInfo], placed: Mapping[str, int] | None = None) -> str | None:
    """The id of the node a new room should go to; None when no node can take one."""
    placed = placed or {}
    best: tuple[float, int, str] | None = None
    for node in nodes:
        if node.draining:
            continue
        load = node_load(node, placed.get(node.id, 0))
        if load >= 1.0:
            continue
        key = (round(load, 6), node.rooms + node.calls + placed.get(node.id, 0), node.id)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]

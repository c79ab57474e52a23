"""Call events for end-to-end tests: the reader (loadtest.events_reader) and one call's share."""

from __future__ import annotations

from typing import Any

from loadtest.events_reader import EventsReader

__all__ = ["EventsReader", "one_call"]


def one_call(events: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    """The events of one call, in the order they arrived."""
    return [e for e in events if e.get("call_id") == call_id]

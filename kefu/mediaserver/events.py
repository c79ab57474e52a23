"""Events published on the bus. Frozen, small, and JSON-friendly (see ``as_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class CallEvent:
    call_id: str
    """kefu's call identifier (not the SIP Call-ID, which belongs to the trunk)."""
    at: float
    """Wall-clock time (time.time()) the event happened."""

    def as_dict(self) -> dict[str, Any]:
        return {"type": type(self).__name__, **asdict(self)}


@dataclass(frozen=True, slots=True)
class CallStateChanged(CallEvent):
    old: str
    new: str
    reason: str


@dataclass(frozen=True, slots=True)
class DtmfReceived(CallEvent):
    digit: str
    source: str
    """"rfc4733" or "info"."""


@dataclass(frozen=True, slots=True)
class TransferProgress(CallEvent):
    target: str
    status: int
    """The sipfrag status from the REFER's NOTIFY (or the REFER's own final response)."""

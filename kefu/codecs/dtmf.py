"""RFC 4733 telephone-events: the DTMF payload, a de-duplicating receiver, and a sender."""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from types import MappingProxyType

from kefu.errors import CodecError

__all__ = [
    "EVENT_TO_DIGIT",
    "DtmfDigit",
    "DtmfReceiver",
    "TelephoneEvent",
    "digit_for_event",
    "dtmf_packets",
    "event_for_digit",
]

EVENT_TO_DIGIT = MappingProxyType(
    {
        **{i: str(i) for i in range(10)},
        10: "*",
        11: "#",
        12: "A",
        13: "B",
        14: "C",
        15: "D",
        16: "!",
    }
)
"""RFC 4733 §3.2 Table 7 DTMF events; 16 (flash) is written "!" as in SIP INFO dtmf-relay."""

_DIGIT_TO_EVENT = MappingProxyType({digit: event for event, digit in EVENT_TO_DIGIT.items()})
_WIRE = struct.Struct("!BBH")
_END_RETRANSMISSIONS = 3
_RECENT_EVENTS = 8
"""How many past event timestamps the receiver remembers to recognise stragglers."""


def digit_for_event(event: int) -> str:
    """The DTMF character of an RFC 4733 event code; CodecError if it is not DTMF."""
    try:
        return EVENT_TO_DIGIT[event]
    except KeyError:
        raise CodecError(f"telephone-event {event} is not a DTMF digit") from None


def event_for_digit(digit: str) -> int:
    """The RFC 4733 event code of "0"-"9", "*", "#", "A"-"D" (any case) or "!" (flash)."""
    try:
        return _DIGIT_TO_EVENT[digit.upper()]
    except KeyError:
        raise CodecError(f"{digit!r} is not a DTMF digit") from None


@dataclass(frozen=True, slots=True)
class TelephoneEvent:
    """One RFC 4733 §2.3 event payload (4 bytes)."""

    event: int
    """Event code, 0-255 (RFC 4733 §2.3.1); 0-16 are DTMF (§3.2)."""
    end: bool
    """E bit: this packet ends the event (§2.3.2)."""
    volume: int
    """Power level in -dBm0, 0-63 (§2.3.4); DTMF is sent at 0-36 dBm0 below full scale."""
    duration: int
    """Duration so far in RTP timestamp units, 0-65535 (§2.3.5)."""

    def __post_init__(self) -> None:
        if not (0 <= self.event <= 255 and 0 <= self.volume <= 63 and 0 <= self.duration <= 65535):
            raise ValueError(f"telephone-event field out of range: {self!r}")

    @classmethod
    def parse(cls, data: bytes) -> TelephoneEvent:
        """Parse the first event of a payload; the R bit is ignored as §2.3.3 requires."""
        if len(data) < _WIRE.size:
            raise CodecError(f"telephone-event payload is {len(data)} bytes, needs 4")
        event, flags, duration = _WIRE.unpack_from(data)
        return cls(event, bool(flags & 0x80), flags & 0x3F, duration)

    def serialize(self) -> bytes:
        """The 4-byte wire form."""
        return _WIRE.pack(self.event, (0x80 if self.end else 0) | self.volume, self.duration)

    def __bytes__(self) -> bytes:
        return self.serialize()


@dataclass(frozen=True, slots=True)
class DtmfDigit:
    """A completed DTMF key press."""

    digit: str
    """The key: "0"-"9", "*", "#", "A"-"D" or "!" (flash)."""
    duration_ms: int
    """How long it was held, from the end packet's duration (RFC 4733 §2.5.1.4)."""


class DtmfReceiver:
    """Turn a stream of telephone-event payloads into key presses, each reported once.

    An event is identified by its RTP timestamp (RFC 4733 §2.5.2.1): the first packet with a
    new timestamp reports the digit, whether or not its marker survived; continuation packets
    and the three end retransmissions with that timestamp are swallowed, and so are
    stragglers of the previous few events. A long event's continuation segment (§2.5.1.3,
    new timestamp exactly where the old segment's duration ends) is not a new key press.
    """

    def __init__(self, clock_rate: int = 8000) -> None:
        self._clock = clock_rate
        self._recent: deque[int] = deque(maxlen=_RECENT_EVENTS)
        self._timestamp: int | None = None
        self._event = 0
        self._duration = 0
        """Largest duration seen in the current segment."""
        self._carried = 0
        """Duration of the earlier segments of a long event."""
        self._ended = True
        self.last_digit: DtmfDigit | None = None
        """The most recently finished key press, with its duration."""

    def feed(self, timestamp: int, payload: bytes, marker: bool) -> str | None:
        """Process one RTP packet; returns the digit when it starts a new key press.

        ``marker`` is not trusted: if the first packet (the one with the marker) is lost, the
        next one still reports the digit. Malformed payloads raise CodecError.
        """
        event = TelephoneEvent.parse(payload)
        if timestamp == self._timestamp:
            self._extend(event)
            return None
        if timestamp in self._recent:
            return None
        self._recent.append(timestamp)
        is_next_segment = (
            self._timestamp is not None
            and not self._ended
            and event.event == self._event
            and (timestamp - self._timestamp) % (1 << 32) == self._duration
        )
        if is_next_segment:
            self._carried += self._duration
        else:
            if not self._ended:
                self._finish()  # its end packets were lost
            self._carried = 0
            self._event = event.event
            self._ended = False
        self._timestamp = timestamp
        self._duration = 0
        self._extend(event)
        return None if is_next_segment else EVENT_TO_DIGIT.get(event.event)

    def _extend(self, event: TelephoneEvent) -> None:
        if event.event != self._event:
            return
        self._duration = max(self._duration, event.duration)
        if event.end and not self._ended:
            self._finish()

    def _finish(self) -> None:
        self._ended = True
        digit = EVENT_TO_DIGIT.get(self._event)
        if digit is not None:
            total = self._carried + self._duration
            self.last_digit = DtmfDigit(digit, total * 1000 // self._clock)


def dtmf_packets(
    digit: str,
    *,
    clock_rate: int = 8000,
    duration_ms: int = 160,
    packet_ms: int = 20,
    volume: int = 10,
) -> list[tuple[TelephoneEvent, bool]]:
    """The payloads (and marker bits) that send one key press; all share one RTP timestamp.

    One packet every ``packet_ms`` carrying the growing duration (RFC 4733 §2.5.1.2, the
    first with the marker bit), then the end packet three times (§2.5.1.4).
    """
    code = event_for_digit(digit)
    if duration_ms <= 0 or packet_ms <= 0:
        raise ValueError("duration_ms and packet_ms must be positive")
    total = clock_rate * duration_ms // 1000
    if total > 0xFFFF:
        raise ValueError(f"{duration_ms} ms needs a multi-segment event (RFC 4733 §2.5.1.3)")
    step = clock_rate * packet_ms // 1000
    packets = [
        TelephoneEvent(code, False, volume, duration) for duration in range(step, total, step)
    ]
    packets += [TelephoneEvent(code, True, volume, total)] * _END_RETRANSMISSIONS
    return [(event, index == 0) for index, event in enumerate(packets)]

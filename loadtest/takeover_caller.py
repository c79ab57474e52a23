"""The SIP callers of ``python -m loadtest takeover``: their script, and what the capture
says about each of them.

Every caller (SIPp ``uac_echo``, G.711 µ-law) plays the same script (seconds from its first
RTP packet):

* 5.0 "Where is your nearest store?" (Q1: the KB answer lasts about 10 s);
* 13.5 "Thank you Maria, that is very helpful." (said to the agent, during the takeover);
* 21.5 "Do you take gift cards?" (Q2, to the AI again), then 9 s of silence.

From the capture of its media ports, :func:`wire_of` takes the caller → kefu packets (speech
marks on the wire, frames, sequence accounting) and every kefu → caller stream (frames, decoded
audio, sequence gaps and RTP timestamp skips).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadtest.takeover_frames import Frame, rms
from loadtest.voice import (
    BARGE_LONG,
    BARGE_SECOND,
    FRAME_S,
    SIP_RATE,
    Heard,
    Placed,
    Question,
    Script,
    build_script,
)

CALLER_THANKS = "Thank you Maria, that is very helpful."
LEAD_S = 5.0
"""Silence before Q1: kefu's greeting plays meanwhile."""
THANKS_AT_S = 13.5
Q2_AT_S = 21.5
SCRIPT_TAIL_S = 9.0


def timestamp_skips(
    packets: Sequence[tuple[float, int]], step: int = 160
) -> list[tuple[float, int]]:
    """(arrival, frames skipped) for each packet whose RTP timestamp jumped more than one
    ``step`` past the previous one's, packets being (arrival, timestamp) of one SSRC in
    arrival order: audio the sender dropped to catch up, with no sequence gap to show it."""
    out = []
    for (_, prev), (at, ts) in zip(packets, packets[1:], strict=False):
        delta = (ts - prev) & 0xFFFFFFFF
        if step < delta < 0x80000000:
            out.append((at, delta // step - 1))
    return out


@dataclass
class CallWire:
    """One caller as the capture saw it."""

    heard: Heard
    """Script, speech marks on the wire, and the kefu → caller frames (all SSRCs)."""
    sent: list[Frame]
    """Caller → kefu audio packets."""
    sent_arrivals: list[float]
    stream: dict[str, Any]
    """Sequence accounting of the caller → kefu stream (``rtpcap`` stats)."""
    back_ssrcs: int
    back_audio: list[tuple[float, np.ndarray]] = field(default_factory=list)
    """(arrival, decoded 8 kHz PCM) of every kefu → caller audio packet, in arrival order."""
    back_skips: list[tuple[float, int]] = field(default_factory=list)
    """(arrival, frames) where kefu's RTP timestamp to the caller jumped (frames skipped)."""
    back_seq_lost: int = 0
    """kefu → caller packets missing from the sequence numbers the caller saw."""


def caller_script(voice: object) -> Script:
    from kefu.ai_bridge.listen.heldout import speak

    def ask(text: str) -> Question:
        return Question(text[:20], speak(voice, text, noise_scale=0, noise_w_scale=0), text)

    return build_script(
        [ask(BARGE_LONG), ask(CALLER_THANKS), ask(BARGE_SECOND)],
        at=[LEAD_S, THANKS_AT_S, Q2_AT_S],
        tail_s=SCRIPT_TAIL_S,
    )


def wire_of(script: Script, streams: Any, media_port: int) -> CallWire:
    """What the capture says about one caller (``media_port``: SIPp's ``-mp``)."""
    from loadtest.pcap import g711_decode
    from loadtest.rtpcap import RtpStream, StreamKey, find_stream
    from loadtest.voice import _arrival_at

    n = len(script.placed)
    h = Heard(script, [None] * n, [None] * n)
    try:
        sent = find_stream(streams, src_port=media_port)
    except LookupError as exc:
        h.ok, h.error = False, str(exc)
        return CallWire(h, [], [], {}, 0)
    # kefu -> caller: every SSRC (the switch to the room's mix must not hide a stream)
    backs = [s for k, s in streams.items() if k.dst[1] == media_port]
    packets = sorted((p for s in backs for p in s.packets), key=lambda p: p.arrival)
    back = RtpStream(StreamKey(("", 0), ("", media_port), 0), packets)
    audio = [p for p in sent.packets if p.payload_type in (0, 8)]
    base = audio[0].timestamp if audio else 0
    offsets = [((p.timestamp - base) & 0xFFFFFFFF) / SIP_RATE for p in audio]
    placed: Sequence[Placed] = script.placed
    for k, pl in enumerate(placed):
        h.speech_ends[k] = _arrival_at(audio, offsets, pl.speech_end_s - FRAME_S)
        h.speech_starts[k] = _arrival_at(audio, offsets, pl.speech_start_s)
    h.frames = [
        (p.arrival, rms(g711_decode(p.payload, p.payload_type)))
        for p in back.packets
        if p.payload_type in (0, 8)
    ]
    st = sent.stats()
    stream = {
        "lost_on_wire": st.lost,
        "duplicates": st.duplicates,
        "reordered": st.reordered,
        "expected": st.expected,
    }
    frames = [(p.arrival, rms(g711_decode(p.payload, p.payload_type))) for p in audio]
    back_audio = [
        (p.arrival, g711_decode(p.payload, p.payload_type))
        for p in back.packets
        if p.payload_type in (0, 8)
    ]
    skips = [
        skip
        for b in backs
        for skip in timestamp_skips(
            [(p.arrival, p.timestamp) for p in b.packets if p.payload_type in (0, 8)]
        )
    ]
    return CallWire(
        h,
        frames,
        [p.arrival for p in audio],
        stream,
        len(backs),
        back_audio,
        sorted(skips),
        sum(b.stats().lost for b in backs),
    )

"""The client half of ``python -m loadtest webrtc-load``: runs in the worker processes.

A worker owns whole rooms of participants. Each publishes a tone encoded to Opus once and
looped (aiortc only packetizes ``av.Packet`` objects, it never encodes), and counts what it
hears straight off its RTP receivers (nothing is decoded). The coordinator
(:mod:`loadtest.webrtc_load`) drives a worker over a pipe: the worker answers the first
message it sends with join results, then every ``mark`` with a snapshot of its counters, and
``close`` with ``closed`` after leaving.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

PTIME_SAMPLES = 960
"""20 ms at 48 kHz: the RTP timestamp step of one Opus packet (RFC 7587 §4.1)."""
PACKETS_PER_S = 50
READY_TIMEOUT_S = 30.0
"""How long a worker waits for every expected stream to flow before reporting."""


@dataclass(frozen=True, slots=True)
class ParticipantSpec:
    """One simulated participant, as a worker needs it."""

    room: str
    """Room name (kefu) or number as text (Janus)."""
    index: int
    """Position in its room (0 creates the room)."""
    per_room: int
    """How many participants the room will hold (how many streams to expect: per_room - 1)."""
    token: str
    """kefu JWT (empty for Janus)."""
    source_ip: str
    """Loopback address the signaling connection is bound to."""
    freq: float
    """Tone frequency of its microphone."""


@dataclass(frozen=True, slots=True)
class WorkerJob:
    """What one worker process runs."""

    server: str
    """``kefu`` or ``janus``."""
    signaling_url: str
    """kefu: ws://host:port/ws; Janus: http://host:port/janus."""
    participants: tuple[ParticipantSpec, ...]
    join_concurrency: int = 4
    """Joins in flight at once per worker (offer->connected is measured under this load)."""
    use_uvloop: bool = True


def encode_tone(freq: float, seconds: float = 1.0) -> list[bytes]:
    """A tone as 20 ms mono Opus packets, encoded once so the clients never encode again."""
    from kefu.codecs.opus import OpusEncoder
    from loadtest.webrtc_client import tone_pcm

    pcm = tone_pcm(freq, seconds)
    encoder = OpusEncoder(bitrate=24000)
    return [encoder.encode(pcm[i : i + PTIME_SAMPLES]) for i in range(0, pcm.size, PTIME_SAMPLES)]


def looped_opus_track(packets: list[bytes]) -> Any:
    """An audio track whose ``recv()`` yields ``av.Packet`` (aiortc then only packetizes)."""
    import av
    from aiortc import MediaStreamTrack
    from aiortc.mediastreams import MediaStreamError

    from kefu.sfu.mixer import RealTimePacer

    time_base = fractions.Fraction(1, 48000)

    class LoopedOpusTrack(MediaStreamTrack):
        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self.sent = 0
            # Paced from the first packet, not from the previous send: a late wake-up sends
            # the backlog at once instead of drifting (timestamps stay contiguous either way).
            self._pacer = RealTimePacer(PTIME_SAMPLES, PTIME_SAMPLES * PACKETS_PER_S)

        async def recv(self) -> av.Packet:
            if self.readyState != "live":
                raise MediaStreamError
            pts = await self._pacer.next_pts()
            out = av.Packet(packets[self.sent % len(packets)])
            out.pts = pts
            out.time_base = time_base
            self.sent += 1
            return out

    return LoopedOpusTrack()


@dataclass(slots=True)
class StreamTally:
    """RTP counters of one received stream; sequence numbers and timestamps unwrapped."""

    received: int = 0
    highest_seq: int = -1
    highest_ts: int = -1

    def add(self, seq: int, ts: int) -> None:
        if self.highest_seq < 0:
            self.highest_seq, self.highest_ts = seq, ts
        else:
            step = (seq - self.highest_seq) & 0xFFFF
            if 0 < step < 0x8000:  # ahead: a late (reordered) packet never moves it back
                self.highest_seq += step
            ts_step = (ts - self.highest_ts) & 0xFFFFFFFF
            if 0 < ts_step < 0x80000000:
                self.highest_ts += ts_step
        self.received += 1

    def snapshot(self) -> tuple[int, int, int]:
        return self.received, self.highest_seq, self.highest_ts


def tap_receivers(pc: Any, tallies: dict[int, StreamTally]) -> None:
    """Count every RTP packet of ``pc``'s receivers instead of letting aiortc decode it.

    The coroutine ``RTCDtlsTransport`` awaits per packet is shadowed on each receiver
    *instance* (kefu.sfu.forward does the same on the server), so clients stay cheap."""
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind != "audio" or getattr(receiver, "_kefu_tapped", False):
            continue

        async def count(packet: Any, arrival_time_ms: int) -> None:
            tally = tallies.get(packet.ssrc)
            if tally is None:
                tally = tallies[packet.ssrc] = StreamTally()
            tally.add(packet.sequence_number, packet.timestamp)

        receiver._handle_rtp_packet = count
        receiver._kefu_tapped = True


def make_kefu_participant(spec: ParticipantSpec, packets: list[bytes]) -> Any:
    from loadtest.webrtc_client import WebRtcClient

    class KefuParticipant(WebRtcClient):
        """A publishing, counting kefu room participant (see module doc)."""

        def __init__(self) -> None:
            self.tallies: dict[int, StreamTally] = {}
            super().__init__(mic=looped_opus_track(packets))

        def _on_track(self, track: Any) -> None:
            tap_receivers(self.pc, self.tallies)

        async def publish(self, url: str) -> None:
            """Join over /ws from ``spec.source_ip`` (the base class cannot bind a source)."""
            import aiohttp
            from yarl import URL

            connector = aiohttp.TCPConnector(local_addr=(spec.source_ip, 0))
            session = aiohttp.ClientSession(connector=connector)
            try:
                ws = await session.ws_connect(URL(url).update_query(token=spec.token))
                await ws.send_json({"v": 1, "type": "join", "room": spec.room})
                await asyncio.wait_for(self._until_joined(ws), 10.0)
                offer = await self._local_offer()
                self.offer_sent_at = time.monotonic()
                await ws.send_json({"v": 1, "type": "offer", "sdp": offer})
            except BaseException:
                await session.close()
                raise
            self._ws = ws
            self._spawn(self._ws_loop(session, ws))
            await asyncio.wait_for(self.connected.wait(), 15.0)

        async def subscribe(self, url: str) -> None:
            """kefu subscribes by itself (server offers as others publish)."""

        @property
        def sent(self) -> int:
            return int(self.mic.sent)

    return KefuParticipant()


async def _worker(conn: Connection, job: WorkerJob) -> None:
    loop = asyncio.get_running_loop()

    async def command() -> str:
        return str(await loop.run_in_executor(None, conn.recv))

    tones = {s.freq: encode_tone(s.freq) for s in job.participants}
    if job.server == "janus":
        from loadtest.janus import make_janus_participant as make
    else:
        make = make_kefu_participant
    clients = [make(spec, tones[spec.freq]) for spec in job.participants]
    connect_s: list[float] = []
    errors: list[str] = []
    gate = asyncio.Semaphore(job.join_concurrency)

    async def step(client: Any, action: str) -> None:
        async with gate:
            try:
                await getattr(client, action)(job.signaling_url)
            except Exception as exc:  # one failed join is a result, not the end of the run
                errors.append(f"{action}: {type(exc).__name__}: {exc}"[:300])
                return
            if action == "publish" and client.connect_time is not None:
                connect_s.append(client.connect_time)

    await asyncio.gather(*(step(c, "publish") for c in clients))
    await asyncio.gather(*(step(c, "subscribe") for c in clients))

    def flowing(client: Any, spec: ParticipantSpec) -> bool:
        live = [t for t in client.tallies.values() if t.received > 0]
        return len(live) >= spec.per_room - 1

    pairs = list(zip(clients, job.participants, strict=True))
    for _ in range(int(READY_TIMEOUT_S / 0.2)):
        if all(flowing(c, s) for c, s in pairs):
            break
        await asyncio.sleep(0.2)  # first packets arrive on their own; no event to await
    missing = sum(max(0, s.per_room - 1 - len(c.tallies)) for c, s in pairs)
    conn.send({"connect_s": connect_s, "errors": errors, "streams_missing": missing})

    def snapshot() -> list[dict[str, Any]]:
        return [
            {
                "room": spec.room,
                "sent": c.sent,
                "streams": {k: t.snapshot() for k, t in c.tallies.items()},
            }
            for c, spec in pairs
        ]

    while await command() != "close":
        conn.send(snapshot())
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    conn.send("closed")


def worker_entry(conn: Connection, job: WorkerJob) -> None:
    """Process entry point of one worker (spawned: aiortc state is never forked)."""
    if job.use_uvloop:
        import uvloop

        uvloop.run(_worker(conn, job))
    else:
        asyncio.run(_worker(conn, job))

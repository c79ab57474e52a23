"""An aiortc client for tests and load tests of kefu's WebRTC rooms.

Two ways in:

* :meth:`WebRtcClient.connect_local` drives a :class:`kefu.sfu.api.Sfu` in the same process
  (unit tests: no HTTP, the contract's calls made directly, renegotiation answered at once);
* :meth:`WebRtcClient.connect_ws` speaks kefu's ``/ws`` signaling
  (JSON ``{"v": 1, "type": "join"|"offer"|"answer"|"candidate"|...}``, see
  ``kefu/signaling/protocol.py``).

The microphone is a WAV file (any rate, mono or stereo, resampled to 48 kHz) or a tone, paced
in real time; everything heard is recorded (all remote audio tracks summed) and can be written
to a WAV. ICE host candidates are limited to ``host_addresses`` (loopback by default) through
:mod:`kefu.sfu.ice`, and no STUN server is used unless given.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import math
import time
import wave
from pathlib import Path
from typing import Any

import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from kefu.codecs.resample import StreamResampler
from kefu.sfu import ice

RATE = 48000
FRAME = 960
TIME_BASE = fractions.Fraction(1, RATE)


class PacedPcmTrack(MediaStreamTrack):
    """Mono 48 kHz PCM played in 20 ms frames at real-time pace; silence after the end
    (or loops when ``loop``)."""

    kind = "audio"

    def __init__(self, pcm: np.ndarray, *, loop: bool = False) -> None:
        super().__init__()
        self._pcm = pcm.astype(np.int16)
        self._loop = loop
        self._pos = 0
        self._pts = 0
        self._start: float | None = None

    @classmethod
    def from_wav(cls, path: str | Path, *, loop: bool = False) -> PacedPcmTrack:
        return cls(read_wav(path), loop=loop)

    @classmethod
    def tone(cls, freq: float = 440.0, seconds: float = 60.0, level: float = 0.3) -> PacedPcmTrack:
        t = np.arange(int(RATE * seconds)) / RATE
        return cls((np.sin(2 * math.pi * freq * t) * level * 32767).astype(np.int16))

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            self._pts += FRAME
            delay = self._start + self._pts / RATE - now
            if delay > 0:
                await asyncio.sleep(delay)
        chunk = self._pcm[self._pos : self._pos + FRAME]
        self._pos += FRAME
        if self._loop and self._pos >= len(self._pcm):
            self._pos = 0
        if chunk.size < FRAME:
            chunk = np.concatenate((chunk, np.zeros(FRAME - chunk.size, np.int16)))
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = TIME_BASE
        return frame


def read_wav(path: str | Path) -> np.ndarray:
    """16-bit PCM WAV of any rate/channels -> mono int16 at 48 kHz."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported")
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
    if rate != RATE:
        resampler = StreamResampler(rate, RATE)
        frames = resampler.process(pcm) + resampler.process(np.zeros(rate // 10, np.int16))
        pcm = np.concatenate(frames) if frames else np.zeros(0, np.int16)
    return pcm


def write_wav(path: str | Path, pcm: np.ndarray, rate: int = RATE) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.astype(np.int16).tobytes())


def frame_to_mono(frame: av.AudioFrame) -> np.ndarray:
    data = frame.to_ndarray()
    channels = frame.layout.nb_channels
    if frame.format.is_planar:
        data = data.reshape(channels, -1).mean(axis=0)
    else:
        data = data.reshape(-1, channels).mean(axis=1)
    if data.dtype.kind == "f":
        data = data * 32767
    return np.clip(data, -32768, 32767).astype(np.int16)


class WebRtcClient:
    """One simulated browser: a mic track, a recorder, an events channel."""

    def __init__(
        self,
        *,
        mic: MediaStreamTrack | None = None,
        ice_servers: tuple[dict[str, Any], ...] = (),
        host_addresses: tuple[str, ...] | None = ("127.0.0.1",),
        max_record_s: float = 120.0,
    ) -> None:
        self.mic = mic
        self.host_addresses = host_addresses
        self.events: list[dict[str, Any]] = []
        self.connected = asyncio.Event()
        self.offer_sent_at: float | None = None
        self.connected_at: float | None = None
        self._recorded: dict[int, list[np.ndarray]] = {}
        self._max_frames = int(max_record_s * 50)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.pc = RTCPeerConnection(
            RTCConfiguration(iceServers=[RTCIceServer(**s) for s in ice_servers])
        )
        self.channel = self.pc.createDataChannel("kefu-events")
        self.channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_state)
        if mic is not None:
            self.pc.addTrack(mic)
        else:
            self.pc.addTransceiver("audio", direction="recvonly")

    @property
    def connect_time(self) -> float | None:
        """Seconds from sending the first offer to 'connected'."""
        if self.offer_sent_at is None or self.connected_at is None:
            return None
        return self.connected_at - self.offer_sent_at

    # --- in-process -------------------------------------------------------------------

    async def connect_local(
        self, sfu: Any, room_id: str, participant_id: str, *, role: str = "customer"
    ) -> Any:
        """Join ``sfu`` directly; returns the server-side Participant."""
        participant = await sfu.join(room_id, participant_id, role=role)
        participant.on_renegotiation_needed = lambda: self._spawn(self._renegotiate(participant))
        offer = await self._local_offer()
        self.offer_sent_at = time.monotonic()
        answer = await participant.handle_offer(offer)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        return participant

    async def _renegotiate(self, participant: Any) -> None:
        if self.pc.signalingState == "closed":
            return
        offer = await participant.create_offer()
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        answer = await self.pc.createAnswer()
        with ice.host_addresses(self.host_addresses):
            await self.pc.setLocalDescription(answer)
        await participant.handle_answer(self.pc.localDescription.sdp)

    # --- over /ws ---------------------------------------------------------------------

    async def connect_ws(
        self, url: str, room_id: str, *, token: str | None = None, role: str = "customer"
    ) -> None:
        """Join through kefu's WebSocket signaling and keep answering it in a task."""
        import aiohttp

        session = aiohttp.ClientSession()
        ws = await session.ws_connect(url)
        join: dict[str, Any] = {"v": 1, "type": "join", "room": room_id, "role": role}
        if token:
            join["token"] = token
        await ws.send_json(join)
        offer = await self._local_offer()
        self.offer_sent_at = time.monotonic()
        await ws.send_json({"v": 1, "type": "offer", "sdp": offer})
        self._spawn(self._ws_loop(session, ws))

    async def _ws_loop(self, session: Any, ws: Any) -> None:
        try:
            async for msg in ws:
                data = json.loads(msg.data)
                kind = data.get("type")
                if kind == "answer":
                    await self.pc.setRemoteDescription(
                        RTCSessionDescription(sdp=data["sdp"], type="answer")
                    )
                elif kind == "offer":
                    await self.pc.setRemoteDescription(
                        RTCSessionDescription(sdp=data["sdp"], type="offer")
                    )
                    answer = await self.pc.createAnswer()
                    with ice.host_addresses(self.host_addresses):
                        await self.pc.setLocalDescription(answer)
                    await ws.send_json({"v": 1, "type": "answer", "sdp": answer.sdp})
                elif kind == "event" and isinstance(data.get("event"), dict):
                    self.events.append(data["event"])
        finally:
            await ws.close()
            await session.close()

    # --- media ------------------------------------------------------------------------

    def heard(self) -> np.ndarray:
        """Everything heard so far, all remote tracks summed, mono 48 kHz."""
        tracks = [np.concatenate(parts) for parts in self._recorded.values() if parts]
        if not tracks:
            return np.zeros(0, np.int16)
        out = np.zeros(max(len(t) for t in tracks), np.int32)
        for t in tracks:
            out[: len(t)] += t
        return np.clip(out, -32768, 32767).astype(np.int16)

    def record_to(self, path: str | Path) -> None:
        write_wav(path, self.heard())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()

    # --- internals --------------------------------------------------------------------

    async def _local_offer(self) -> str:
        offer = await self.pc.createOffer()
        with ice.host_addresses(self.host_addresses):
            await self.pc.setLocalDescription(offer)
        return str(self.pc.localDescription.sdp)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._record(track))

    async def _record(self, track: MediaStreamTrack) -> None:
        parts = self._recorded.setdefault(id(track), [])
        resampler: StreamResampler | None = None
        try:
            while True:
                frame = await track.recv()
                pcm = frame_to_mono(frame)
                if frame.sample_rate != RATE:
                    resampler = resampler or StreamResampler(frame.sample_rate, RATE)
                    pcm = np.concatenate(resampler.process(pcm) or [np.zeros(0, np.int16)])
                if len(parts) < self._max_frames:
                    parts.append(pcm)
        except MediaStreamError:
            pass

    def _on_message(self, message: Any) -> None:
        if isinstance(message, str):
            try:
                event = json.loads(message)
            except ValueError:
                return
            if isinstance(event, dict):
                self.events.append(event)

    def _on_state(self) -> None:
        if self.pc.connectionState == "connected" and not self.connected.is_set():
            self.connected_at = time.monotonic()
            self.connected.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

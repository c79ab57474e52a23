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
    RTCIceTransportPolicy,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import candidate_from_sdp

from kefu.codecs.resample import StreamResampler
from kefu.errors import LocalError, RemoteError
from kefu.sfu import ice
from kefu.sfu.forward import mono_frame
from kefu.sfu.mixer import RealTimePacer
from loadtest.video_record import Y4mRecorder

RATE = 48000
FRAME = 960
TIME_BASE = fractions.Fraction(1, RATE)


class SignalingRefused(RemoteError):
    """kefu answered the WebSocket with an ``error`` (bad token, forbidden, room full...) or
    closed it before ``joined``; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class NoRelayCandidates(LocalError):
    """Relay-only mode gathered no TURN candidate in time: wrong TURN credentials, an
    unreachable TURN server, or none configured (aiortc itself would stay silently in
    ``new``)."""


class PacedPcmTrack(MediaStreamTrack):
    """Mono 48 kHz PCM played in 20 ms frames at real-time pace; silence after the end
    (or loops when ``loop``)."""

    kind = "audio"

    def __init__(self, pcm: np.ndarray, *, loop: bool = False) -> None:
        super().__init__()
        self._pcm = pcm.astype(np.int16)
        self._loop = loop
        self._pos = 0
        self._pacer = RealTimePacer(FRAME, RATE)

    @property
    def _start(self) -> float | None:
        """Monotonic time of the first frame (the pacing origin; loadtest.voice reads it)."""
        return self._pacer._start  # noqa: SLF001 - the pacer keeps no public origin

    @classmethod
    def from_wav(cls, path: str | Path, *, loop: bool = False) -> PacedPcmTrack:
        return cls(read_wav(path), loop=loop)

    @classmethod
    def tone(cls, freq: float = 440.0, seconds: float = 60.0, level: float = 0.3) -> PacedPcmTrack:
        return cls(tone_pcm(freq, seconds, level))

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        pts = await self._pacer.next_pts()
        chunk = self._pcm[self._pos : self._pos + FRAME]
        self._pos += FRAME
        if self._loop and self._pos >= len(self._pcm):
            self._pos = 0
        if chunk.size < FRAME:
            chunk = np.concatenate((chunk, np.zeros(FRAME - chunk.size, np.int16)))
        return mono_frame(chunk, pts, RATE)


def tone_pcm(freq: float, seconds: float, level: float = 0.3) -> np.ndarray:
    """A sine tone as mono int16 samples at 48 kHz, ``level`` of full scale."""
    t = np.arange(int(RATE * seconds)) / RATE
    return (np.sin(2 * math.pi * freq * t) * level * 32767).astype(np.int16)


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
    # Decide on the sample format before averaging: mean() turns s16 into float64 too.
    is_float = data.dtype.kind == "f"
    channels = frame.layout.nb_channels
    if frame.format.is_planar:
        data = data.reshape(channels, -1).mean(axis=0)
    else:
        data = data.reshape(-1, channels).mean(axis=1)
    if is_float:
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
        relay_only: bool = False,
        gather_timeout_s: float = 5.0,
        video: Y4mRecorder | None = None,
    ) -> None:
        self.mic = mic
        self.video = video
        """Where the avatar's video goes; with one, the client asks for video
        (``avatar.mode``) as soon as its events channel opens."""
        self.video_frames = 0
        self.host_addresses = host_addresses
        self.events: list[dict[str, Any]] = []
        self.avatar_frames: list[tuple[float, bytes]] = []
        """(arrival ``time.time()``, frame) of each ``kefu-avatar`` message, at most 60 a
        second of ``max_record_s``."""
        self._max_avatar_frames = int(max_record_s * 60)
        self.signals: list[dict[str, Any]] = []
        self._early_candidates: list[dict[str, Any] | None] = []
        """``error`` and ``bye`` messages received after ``joined``."""
        self.connected = asyncio.Event()
        self.offer_sent_at: float | None = None
        self.connected_at: float | None = None
        self._recorded: dict[int, list[np.ndarray]] = {}
        self.first_audio_at: float | None = None
        """``time.time()`` of the first sample heard (any track)."""
        self._max_frames = int(max_record_s * 50)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.relay_only = relay_only
        self.gather_timeout_s = gather_timeout_s
        self.participant_id: str | None = None
        self.session_id: str | None = None
        self.ice_servers: tuple[dict[str, Any], ...] = ice_servers
        self.pc = self._new_pc(ice_servers)

    def _new_pc(self, ice_servers: tuple[dict[str, Any], ...]) -> RTCPeerConnection:
        # Relay-only uses aiortc's own RTCIceTransportPolicy.RELAY (aioice then gathers only
        # TURN candidates and pairs nothing else), the same knob as a browser's
        # iceTransportPolicy: "relay".
        policy = RTCIceTransportPolicy.RELAY if self.relay_only else RTCIceTransportPolicy.ALL
        pc = RTCPeerConnection(
            RTCConfiguration(
                iceServers=[RTCIceServer(**s) for s in ice_servers], iceTransportPolicy=policy
            )
        )
        self.channel = pc.createDataChannel("kefu-events")
        self.channel.on("message", self._on_message)
        if self.video is not None:
            channel = self.channel
            channel.on("open", lambda: channel.send('{"type":"avatar.mode","mode":"video"}'))
        # the avatar's weights: a stale frame is worth nothing, so no ordering, no retransmits
        self.avatar_channel = pc.createDataChannel("kefu-avatar", ordered=False, maxRetransmits=0)
        self.avatar_channel.on("message", self._on_avatar_message)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", lambda: self._on_state(pc))
        if self.mic is not None:
            pc.addTrack(self.mic)
        else:
            pc.addTransceiver("audio", direction="recvonly")
        return pc

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
        self,
        url: str,
        room_id: str,
        *,
        token: str,
        display: str = "",
        timeout_s: float = 10.0,
    ) -> dict[str, Any]:
        """Join through kefu's WebSocket signaling (docs/signaling.md) and keep answering it
        in a task; returns the ``joined`` message.

        ``url`` is the ``ws://host:port/ws`` endpoint (the token is added as ``?token=``).
        Unless the client was built with explicit ``ice_servers``, the peer connection uses
        the ``ice_servers`` kefu hands out in ``joined`` (TURN credentials included).
        Raises :class:`SignalingRefused` when kefu refuses and :class:`NoRelayCandidates`
        when relay-only gathering finds no TURN candidate within ``gather_timeout_s``.
        """
        import aiohttp
        from yarl import URL

        session = aiohttp.ClientSession()
        try:
            ws = await session.ws_connect(URL(url).update_query(token=token), heartbeat=None)
            await ws.send_json({"v": 1, "type": "join", "room": room_id, "display": display})
            joined = await asyncio.wait_for(self._until_joined(ws), timeout_s)
            self.participant_id = joined.get("participant")
            self.session_id = joined.get("session")
            offered = tuple(joined.get("ice_servers") or ())
            if offered and not self.ice_servers:
                await self.pc.close()
                self.ice_servers = offered
                self.pc = self._new_pc(offered)
            offer = await self._local_offer()
            self.offer_sent_at = time.monotonic()
            await ws.send_json({"v": 1, "type": "offer", "sdp": offer})
        except BaseException:
            await session.close()
            raise
        self._ws = ws
        self._spawn(self._ws_loop(session, ws))
        return joined

    async def _until_joined(self, ws: Any) -> dict[str, Any]:
        import aiohttp

        async for msg in ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if data.get("type") == "joined":
                return dict(data)
            if data.get("type") == "error":
                raise SignalingRefused(str(data.get("code")), str(data.get("message")))
        raise SignalingRefused("closed", f"socket closed before joined (code {ws.close_code})")

    async def leave(self) -> None:
        """Say ``leave`` (the server answers ``bye`` and closes the socket)."""
        ws = getattr(self, "_ws", None)
        if ws is not None and not ws.closed:
            await ws.send_json({"v": 1, "type": "leave"})

    async def _ws_loop(self, session: Any, ws: Any) -> None:
        import aiohttp

        try:
            async for msg in ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    break
                await self._on_signal(ws, json.loads(msg.data))
        finally:
            await ws.close()
            await session.close()

    async def _on_signal(self, ws: Any, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "answer":
            await self.pc.setRemoteDescription(
                RTCSessionDescription(sdp=data["sdp"], type="answer")
            )
            early, self._early_candidates = self._early_candidates, []
            for candidate in early:
                await self._add_remote_candidate(candidate)
        elif kind == "offer":
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=data["sdp"], type="offer"))
            answer = await self.pc.createAnswer()
            with ice.host_addresses(self.host_addresses):
                await self.pc.setLocalDescription(answer)
            await ws.send_json({"v": 1, "type": "answer", "sdp": self.pc.localDescription.sdp})
        elif kind == "candidate":
            await self._add_remote_candidate(data.get("candidate"))
        elif kind == "event" and isinstance(data.get("event"), dict):
            self.events.append(data["event"])
        elif kind in ("error", "bye"):
            self.signals.append(data)

    async def _add_remote_candidate(self, candidate: dict[str, Any] | None) -> None:
        if self.pc.remoteDescription is None:
            # kefu may trickle (even end-of-candidates) before its answer arrives; applying
            # them now would end ICE with no remote candidates and fail the connection.
            self._early_candidates.append(candidate)
            return
        if candidate is None:
            await self.pc.addIceCandidate(None)
            return
        text = str(candidate.get("candidate", ""))
        if not text:
            return
        parsed = candidate_from_sdp(text.removeprefix("candidate:"))
        parsed.sdpMid = candidate.get("sdpMid")
        parsed.sdpMLineIndex = candidate.get("sdpMLineIndex")
        await self.pc.addIceCandidate(parsed)

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

    def heard_by_track(self) -> list[np.ndarray]:
        """What each remote audio track carried, in the order the tracks arrived."""
        return [np.concatenate(parts) for parts in self._recorded.values() if parts]

    def record_to(self, path: str | Path) -> None:
        """Write what was heard, and beside it ``<path>.times``: the arrival time of the
        recording's first sample (``time.time()``, seconds), the clock of ``--weights``."""
        write_wav(path, self.heard())
        if self.first_audio_at is not None:
            Path(f"{path}.times").write_text(f"{self.first_audio_at:.6f}\n")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()

    # --- internals --------------------------------------------------------------------

    async def _local_offer(self) -> str:
        offer = await self.pc.createOffer()
        with ice.host_addresses(self.host_addresses):
            try:
                # aiortc gathers every candidate inside setLocalDescription; a TURN server
                # that keeps refusing must not hang the client.
                await asyncio.wait_for(self.pc.setLocalDescription(offer), self.gather_timeout_s)
            except TimeoutError:
                if self.relay_only:
                    raise NoRelayCandidates(self._no_relay_message()) from None
                raise
        sdp = str(self.pc.localDescription.sdp)
        if self.relay_only and " typ relay" not in sdp:
            raise NoRelayCandidates(self._no_relay_message())
        return sdp

    def _no_relay_message(self) -> str:
        urls = [u for s in self.ice_servers for u in _urls(s) if u.startswith(("turn:", "turns:"))]
        where = ", ".join(urls) if urls else "no TURN server configured"
        return (
            f"no relay candidates gathered within {self.gather_timeout_s:g} s ({where}): "
            "check the TURN credentials (webrtc.turn_secret must equal coturn's "
            "static-auth-secret) and that the TURN server is reachable"
        )

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._record(track))
        elif track.kind == "video" and self.video is not None:
            self._spawn(self._record_video(track, self.video))

    async def _record_video(self, track: MediaStreamTrack, recorder: Y4mRecorder) -> None:
        try:
            while True:
                frame = await track.recv()
                recorder.add(frame, time.time())
                self.video_frames += 1
        except MediaStreamError:
            pass

    def _on_frame(self, track: MediaStreamTrack, pcm: np.ndarray) -> None:
        """Called with each received frame (mono, its own rate) as it arrives: a hook for
        clients that time frames; the base client only records them."""

    async def _record(self, track: MediaStreamTrack) -> None:
        parts = self._recorded.setdefault(id(track), [])
        resampler: StreamResampler | None = None
        try:
            while True:
                frame = await track.recv()
                pcm = frame_to_mono(frame)
                if self.first_audio_at is None:  # the first sample arrived with this frame
                    self.first_audio_at = time.time() - len(pcm) / frame.sample_rate
                self._on_frame(track, pcm)
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

    def _on_avatar_message(self, message: Any) -> None:
        if isinstance(message, bytes) and len(self.avatar_frames) < self._max_avatar_frames:
            self.avatar_frames.append((time.time(), message))

    def _on_state(self, pc: RTCPeerConnection) -> None:
        if pc is not self.pc:
            return
        if pc.connectionState == "connected" and not self.connected.is_set():
            self.connected_at = time.monotonic()
            self.connected.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _urls(server: dict[str, Any]) -> list[str]:
    urls = server.get("urls", ())
    return [urls] if isinstance(urls, str) else [str(u) for u in urls]

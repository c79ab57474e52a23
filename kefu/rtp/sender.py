"""The paced RTP sender: pulls the played track, encodes, sends one packet per ptime.

API CONTRACT:

    RtpSender(session, send: Callable[[bytes], None], clock=None)
        .configure(codec, ptime_ms=20); .set_source(track | None); .queue_dtmf(digit)
        .sending: bool (False on hold: the source is still drained, nothing goes out)
        .start(); await .stop()
        .packets_sent, .slots_skipped, .source_ended, .source_errors, .dtmf_dropped

The sender sleeps until each slot's deadline, so a source faster than real time is pulled at
real time. A slow source leaves slots empty; when it comes back the RTP timestamp jumps by
the missed slots (marker set) so the peer's jitter estimate stays sane, and at most
_MAX_BURST late frames go out back to back. Timing, costs and the echo case:
:mod:`kefu.rtp.track`. ``clock`` defaults to the running loop's time(); tests pass a
hand-driven one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

import av
import numpy as np
import structlog
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from numpy.typing import NDArray

from kefu.codecs.registry import CodecInfo, make_encoder
from kefu.errors import CodecError
from kefu.rtp.session import RtpSession
from kefu.rtp.track import RtpInboundTrack

# A sender more than this many frames late skips slots instead of bursting them all.
_MAX_BURST = 3
_MAX_DTMF_QUEUED = 16


class RtpSender:
    """Pulls the played track, encodes, and sends one packet per ptime."""

    def __init__(
        self,
        session: RtpSession,
        send: Callable[[bytes], None],
        clock: Callable[[], float] | None = None,
        *,
        log: Any = None,
    ) -> None:
        self._session = session
        self._send = send
        self._clock_fn = clock
        self._log = log or structlog.get_logger("kefu.rtp")
        self._codec: CodecInfo | None = None
        self._source: MediaStreamTrack | None = None
        self._wake = asyncio.Event()
        self._dtmf: deque[str] = deque()
        self._task: asyncio.Task[None] | None = None
        self._cancelled: set[asyncio.Task[None]] = set()
        self._receiving: asyncio.Task[None] | None = None
        self._deadline: float | None = None
        self._marker = True
        self._pending: list[NDArray[np.int16]] = []
        self._pending_samples = 0
        self._resampler: av.AudioResampler | None = None
        self._resampler_key: tuple[str, str, int] | None = None
        self.sending = True
        self.on_payload: Callable[[bytes], None] | None = None
        """Sees every audio payload sent (the call's recording)."""
        self.packets_sent = 0
        self.slots_skipped = 0
        self.source_ended = 0
        self.dtmf_dropped = 0
        self.encode_errors = 0
        self.bad_frames = 0
        self.source_errors = 0

    def _clock(self) -> float:
        if self._clock_fn is None:
            self._clock_fn = asyncio.get_running_loop().time
        return self._clock_fn()

    def configure(self, codec: CodecInfo, ptime_ms: int = 20) -> None:
        """Set or change the codec; partial frames in the old format are dropped."""
        self._codec = codec
        self._ptime = ptime_ms / 1000
        self._samples = codec.frame_samples(ptime_ms)
        self._step = codec.rtp_timestamp_step(ptime_ms)
        self._encoder = make_encoder(codec.name, ptime_ms=ptime_ms)
        self._pending = []
        self._pending_samples = 0
        self._resampler = None
        self._resampler_key = None
        self._wake.set()

    def set_source(self, track: MediaStreamTrack | None) -> None:
        """Replace what we play; a recv() pending on the old source is abandoned."""
        self._source = track
        self._pending = []
        self._pending_samples = 0
        self._interrupt()

    def queue_dtmf(self, digit: str) -> None:
        if len(self._dtmf) >= _MAX_DTMF_QUEUED:
            self.dtmf_dropped += 1
            return
        self._dtmf.append(digit)
        self._interrupt()

    def _interrupt(self) -> None:
        self._wake.set()
        if self._task is not None and self._receiving is self._task:
            # The old source may never produce again; restart the loop rather than wait.
            self._task.cancel()
            self._cancelled.add(self._task)
            self._task.add_done_callback(self._cancelled.discard)
            self._task = None
            self.start()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        tasks = set(self._cancelled)
        if self._task is not None:
            tasks.add(self._task)
            self._task = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        me = asyncio.current_task()
        while True:
            if self._dtmf and self._codec is not None:
                await self._send_dtmf(self._dtmf.popleft())
                continue
            source = self._source
            if source is None or self._codec is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self._receiving = me
            passthrough = isinstance(source, RtpInboundTrack) and source.codec == self._codec
            try:
                if passthrough:
                    assert isinstance(source, RtpInboundTrack)
                    item: av.AudioFrame | bytes | None = await source.recv_payload()
                else:
                    item = await source.recv()  # type: ignore[assignment]
            except MediaStreamError:
                if self._source is source:
                    self._source = None
                    self.source_ended += 1
                continue
            except Exception:
                # A broken upstream stage must not kill the leg: treat it as ended.
                self._log.exception("rtp_source_failed")
                if self._source is source:
                    self._source = None
                    self.source_errors += 1
                continue
            finally:
                if self._receiving is me:
                    self._receiving = None
            if source is not self._source:
                continue
            if passthrough:
                await self._pace()
                self._emit_payload(item if isinstance(item, bytes) else None)
                continue
            if not isinstance(item, av.AudioFrame):
                self.bad_frames += 1
                continue
            for pcm in self._reframe(item):
                await self._pace()
                self._emit(pcm)

    async def _pace(self) -> None:
        now = self._clock()
        if self._deadline is None:
            self._deadline = now
            self._marker = True
        lag = now - self._deadline
        if lag > _MAX_BURST * self._ptime:
            missed = int(lag / self._ptime)
            self._session.advance_timestamp(missed * self._step)
            self._deadline += missed * self._ptime
            self.slots_skipped += missed
            self._marker = True
        elif lag < 0:
            await asyncio.sleep(-lag)
        self._deadline += self._ptime

    def _emit(self, pcm: NDArray[np.int16]) -> None:
        if not self.sending:
            self._session.advance_timestamp(self._step)
            self._marker = True
            return
        try:
            payload = self._encoder.encode(pcm)
        except (CodecError, ValueError):
            self.encode_errors += 1
            self._session.advance_timestamp(self._step)
            return
        self._emit_payload(payload)

    def _emit_payload(self, payload: bytes | None) -> None:
        if payload is None or not self.sending:
            self._session.advance_timestamp(self._step)
            self._marker = True
            return
        data = self._session.packetize(payload, self._step, self._clock(), marker=self._marker)
        self._marker = False
        self.packets_sent += 1
        self._send(data)
        if self.on_payload is not None:
            self.on_payload(payload)

    async def _send_dtmf(self, digit: str) -> None:
        try:
            datagrams = self._session.dtmf_datagrams(digit, self._clock())
        except ValueError:
            self.dtmf_dropped += 1
            return
        for data in datagrams:
            await self._pace()
            if self.sending:
                self._send(data)
        # The audio after an event starts a new talkspurt (RFC 4733 §2.5.1.2 leaves the
        # marker to the audio codec's rules).
        self._marker = True

    def _reframe(self, frame: av.AudioFrame) -> list[NDArray[np.int16]]:
        """Convert to s16 mono at the codec rate and cut exact ptime frames."""
        assert self._codec is not None
        rate = self._codec.sample_rate
        if frame.format.name == "s16" and frame.layout.name == "mono" and frame.sample_rate == rate:
            chunks = [_samples_of(frame)]
        else:
            key = (frame.format.name, frame.layout.name, frame.sample_rate)
            if self._resampler is None or self._resampler_key != key:
                # PyAV fixes a resampler's input format on first use; a new format needs a
                # new one.
                self._resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
                self._resampler_key = key
            chunks = [_samples_of(f) for f in self._resampler.resample(frame)]
        n = self._samples
        out: list[NDArray[np.int16]] = []
        for chunk in chunks:
            if not self._pending_samples and chunk.shape[0] == n:
                out.append(chunk)
                continue
            self._pending.append(chunk)
            self._pending_samples += chunk.shape[0]
            if self._pending_samples >= n:
                joined = np.concatenate(self._pending)
                whole = (joined.shape[0] // n) * n
                out.extend(joined[i : i + n] for i in range(0, whole, n))
                rest = joined[whole:]
                self._pending = [rest] if rest.shape[0] else []
                self._pending_samples = rest.shape[0]
        return out


def _samples_of(frame: av.AudioFrame) -> NDArray[np.int16]:
    """The samples of an s16 mono frame as a flat array (no copy)."""
    return frame.to_ndarray().reshape(-1).astype(np.int16, copy=False)

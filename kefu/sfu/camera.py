"""A browser's camera in a room: its video track republished as that participant's
:class:`~kefu.sfu.video.VideoFanout`, to the members that asked for video.

Unlike audio (forwarded untouched, :mod:`.forward`), a camera goes through aiortc's own
receiver: it reassembles and decodes the frames and handles the publisher's side of RTCP
(NACKs for lost packets, a PLI when a frame cannot be decoded, REMB). Each subscriber then has
its own encoder (:mod:`.video`), so a late joiner's PLI or a lossy subscriber's NACKs are
answered by *its* encoder and never reach the publisher.

:class:`CameraPublisher` reads the decoded frames (aiortc's frame queue is unbounded, so it
reads for as long as the track lives, whether anybody wants video or not) and publishes them
with a pts of its own: 90 kHz on the event loop's clock at arrival, strictly increasing, so a
publisher's RTP clock that jumps or goes back cannot stall a subscriber's decoder. Frames are
forwarded at the size received up to :data:`MAX_PIXELS` (1080p); bigger ones are dropped
(counted), not scaled. aiortc's queue of encoded frames waiting for its decoder thread is
bounded to :data:`DECODER_BACKLOG` (:func:`bound_decoder`): a publisher sending more than the
decoder keeps up with loses frames and is asked for a key frame, and memory stays flat.
"""

from __future__ import annotations

import asyncio
import fractions
import queue
from collections.abc import Callable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCRtpReceiver
from aiortc.mediastreams import MediaStreamError

from kefu.sfu.video import VideoFanout

__all__ = ["DECODER_BACKLOG", "MAX_PIXELS", "CameraPublisher", "DecoderBacklog", "bound_decoder"]

MAX_PIXELS = 1920 * 1088
"""Largest picture republished (width × height); a camera sends 640×480 unless asked for more."""
DECODER_BACKLOG = 8
"""Encoded frames that may wait for aiortc's decoder thread."""
VIDEO_TIME_BASE = fractions.Fraction(1, 90000)


class DecoderBacklog(queue.Queue[Any]):
    """aiortc's encoded-frame queue to its decoder thread, bounded: a frame beyond ``limit``
    is dropped (counted) and ``on_drop`` asks the publisher for a key frame; the ``None``
    that stops the thread always gets in."""

    def __init__(self, limit: int, on_drop: Callable[[], None]) -> None:
        super().__init__()
        self.limit = limit
        self.dropped = 0
        self._on_drop = on_drop

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if item is not None and self.qsize() >= self.limit:
            self.dropped += 1
            self._on_drop()
            return
        super().put(item, block, timeout)


def bound_decoder(receiver: RTCRtpReceiver, limit: int = DECODER_BACKLOG) -> DecoderBacklog | None:
    """Swap ``receiver``'s decoder queue for a :class:`DecoderBacklog` (before aiortc starts
    its decoder thread, which is handed the queue; None if too late or aiortc changed)."""
    started = getattr(receiver, "_RTCRtpReceiver__decoder_thread", True)
    error = getattr(receiver, "_RTCRtpReceiver__decoder_error", None)
    if started is not None or error is None:
        return None
    # aiortc sends a PLI on the next packet once its decoder-error event is set
    backlog = DecoderBacklog(limit, error.set)
    receiver._RTCRtpReceiver__decoder_queue = backlog  # type: ignore[attr-defined]
    return backlog


class CameraPublisher:
    """Publishes one received video track as ``owner_id``'s :attr:`fanout` (see module doc);
    ``on_end`` is called once the track has ended or :meth:`stop` was called."""

    def __init__(
        self,
        owner_id: str,
        track: MediaStreamTrack,
        receiver: RTCRtpReceiver,
        *,
        on_end: Callable[[CameraPublisher], None],
    ) -> None:
        self.fanout = VideoFanout(owner_id)
        self.track = track
        self.backlog = bound_decoder(receiver)
        self.frames = 0
        """Frames received from the decoder."""
        self.oversize = 0
        """Frames dropped for being larger than :data:`MAX_PIXELS`."""
        self.ended = False
        self._on_end = on_end
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def stop(self) -> None:
        """Stop reading and close the fanout (every subscriber's track ends)."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        origin: float | None = None
        last = -1
        try:
            while True:
                frame = await self.track.recv()
                self.frames += 1
                if not self.fanout.wanted or not isinstance(frame, av.VideoFrame):
                    continue  # nobody watches: not even reformatted
                if frame.width * frame.height > MAX_PIXELS:
                    self.oversize += 1
                    continue
                if frame.format.name != "yuv420p":
                    frame = frame.reformat(format="yuv420p")  # once, not per subscriber
                now = loop.time()
                origin = now if origin is None else origin
                last = max(int((now - origin) * 90000), last + 1)
                frame.pts = last
                frame.time_base = VIDEO_TIME_BASE
                self.fanout.publish(frame)
        except MediaStreamError:
            pass
        finally:
            self.ended = True
            self.fanout.close()
            self._on_end(self)

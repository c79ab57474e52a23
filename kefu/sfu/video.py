"""Video in a room: one published picture, fanned out to the members who want it.

A :class:`VideoFanout` is what a publisher hands the room (the AI agent's avatar, or a
browser's camera as aiortc decoded it, :mod:`.camera`): it takes *decoded* frames
(``av.VideoFrame``, already in ``yuv420p``) and gives each subscriber its own
:class:`VideoTrack`. Each track goes to ``RTCPeerConnection.addTrack`` of one
subscriber, so aiortc encodes it for that subscriber in the codec it negotiated (VP8 or H.264),
answers its RTCP feedback (PLI and FIR force a key frame of *its* encoder, NACKs resend from
*its* history) and follows its bandwidth estimate (REMB). A late joiner asks for a key frame and
gets one; a lossy subscriber recovers without touching anyone else.

Each track holds at most :data:`QUEUE_FRAMES` frames: a subscriber whose encoder falls behind
loses its oldest frames (counted), never memory and never another subscriber's frames. A
subscriber that does not want video (the caller page's weights or off mode) keeps its track
but receives no frames, so switching back needs no renegotiation; :attr:`VideoFanout.wanted`
tells the publisher whether anybody wants a picture at all (rendering nobody watches is
skipped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import av
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from kefu.sfu.forward import DropOldest, QueueClosed

__all__ = ["QUEUE_FRAMES", "VideoFanout", "VideoTrack"]

QUEUE_FRAMES = 2
"""Frames held per subscriber: the one being encoded may lag one frame, no more."""


class VideoTrack(MediaStreamTrack):
    """One subscriber's view of a :class:`VideoFanout` (its ``recv`` feeds aiortc's encoder)."""

    kind = "video"

    def __init__(self, fanout: VideoFanout) -> None:
        super().__init__()
        self.queue: DropOldest[av.VideoFrame] = DropOldest(QUEUE_FRAMES)
        self.wanted = False
        """Whether frames are delivered (the subscriber asked for video)."""
        self.frames = 0
        """Frames handed to the encoder."""
        self._fanout = fanout

    @property
    def dropped(self) -> int:
        """Frames pushed out unencoded because this subscriber's encoder was behind."""
        return self.queue.dropped

    async def recv(self) -> Any:
        if self.readyState != "live":
            raise MediaStreamError
        try:
            frame = await self.queue.get()
        except QueueClosed:
            self.stop()
            raise MediaStreamError from None
        self.frames += 1
        return frame

    def stop(self) -> None:
        if self.readyState == "live":
            self._fanout.unsubscribe(self)
        super().stop()


class VideoFanout:
    """A published video source of one room member (see module doc)."""

    def __init__(self, owner_id: str, *, on_wanted: Callable[[bool], None] | None = None) -> None:
        self.owner_id = owner_id
        self.on_wanted = on_wanted
        """Called with True when the first subscriber wants video, False when the last stops."""
        self.published = 0
        self._tracks: list[VideoTrack] = []
        self._closed = False

    @property
    def wanted(self) -> bool:
        return any(track.wanted for track in self._tracks)

    @property
    def subscriber_count(self) -> int:
        return len(self._tracks)

    def subscribe(self, *, wanted: bool = True) -> VideoTrack:
        track = VideoTrack(self)
        if self._closed:
            track.queue.close()
            return track
        self._tracks.append(track)
        self.set_wanted(track, wanted)
        return track

    def set_wanted(self, track: VideoTrack, wanted: bool) -> None:
        """Start or stop delivering frames to ``track`` (no renegotiation either way)."""
        before = self.wanted
        track.wanted = wanted and track in self._tracks
        self._notify(before)

    def unsubscribe(self, track: VideoTrack) -> None:
        before = self.wanted
        if track in self._tracks:
            self._tracks.remove(track)
        track.wanted = False
        track.queue.close()
        self._notify(before)

    def publish(self, frame: av.VideoFrame) -> None:
        """Hand ``frame`` to every subscriber that wants video (never blocks, never queues
        more than :data:`QUEUE_FRAMES` per subscriber)."""
        if self._closed:
            return
        self.published += 1
        for track in self._tracks:
            if track.wanted:
                track.queue.put(frame)

    def close(self) -> None:
        self._closed = True
        tracks, self._tracks = self._tracks, []
        for track in tracks:
            track.wanted = False
            track.queue.close()
        if self.on_wanted is not None:
            self.on_wanted(False)

    def _notify(self, before: bool) -> None:
        after = self.wanted
        if after != before and self.on_wanted is not None and not self._closed:
            self.on_wanted(after)

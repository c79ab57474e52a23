"""What any room member is, and the in-process kind.

:class:`RoomMember` is what a room needs from every participant and what every kind does
alike: room events (``on_event``, :meth:`~RoomMember.publish_event`), binary deliveries (the
avatar's frames), audio subscriptions and the idle clock. :class:`LocalParticipant` is an
in-process member (a SIP leg or the AI agent) with no peer connection; the WebRTC kind is
:class:`kefu.sfu.participant.Participant`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kefu.sfu.forward import PacketSource
from kefu.sfu.mixer import AudioMixer, LocalPublisher
from kefu.sfu.video import VideoFanout

if TYPE_CHECKING:
    from kefu.sfu.api import Room


class RoomMember:
    """What a room needs from any participant, and what every kind does alike."""

    def __init__(
        self, room: Room, participant_id: str, *, role: str, display: str, user: str = ""
    ) -> None:
        self.id = participant_id
        self.room_id = room.id
        self.role = role
        self.display = display
        self.user = user
        """Who joined (the token's subject; "" for in-process participants)."""
        self.on_event: Callable[[dict[str, Any]], None] | None = None
        self.source: PacketSource | None = None
        self._room = room
        self._closed = False

    def publish_event(self, event: dict[str, Any]) -> None:
        self._room.broadcast(event, sender=self.id)

    def publish_binary(self, data: bytes) -> None:
        """Send ``data`` on every member's avatar channel (dropped where one is backed up)."""
        self._room.broadcast_binary(data, sender=self.id)

    def _forget(self) -> bool:
        """Take this participant out of its room, once (``leave()`` is idempotent); whether
        this call did it, so the caller frees what the participant holds exactly once."""
        if self._closed:
            return False
        self._closed = True
        self._room.remove(self)
        return True

    def _subscribe(self, owner_id: str, source: PacketSource) -> None:
        raise NotImplementedError

    def _unsubscribe(self, owner_id: str) -> None:
        raise NotImplementedError

    def _deliver(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def _deliver_binary(self, data: bytes) -> None:
        """Binary frames (the avatar's weights); in-process members have no use for them."""

    def _offer_video(self, owner_id: str, fanout: VideoFanout) -> None:
        """``owner_id`` published video; in-process members have no use for it."""

    def _last_activity(self) -> float:
        raise NotImplementedError


class LocalParticipant(RoomMember):
    """An in-process participant: publishes ``source``, hears the room through
    :attr:`mixed_audio` (everyone else mixed). No peer connection, no sockets."""

    def __init__(
        self,
        room: Room,
        participant_id: str,
        *,
        role: str,
        display: str,
        user: str = "",
        prompt_mix: bool = False,
    ) -> None:
        super().__init__(room, participant_id, role=role, display=display, user=user)
        self.mixed_audio = AudioMixer(prompt=prompt_mix)
        self._publisher: LocalPublisher | None = None

    def _start(self, track: Any) -> None:
        self.source = PacketSource(self.id, clock=self._room.clock, counters=self._room.counters)
        self._publisher = LocalPublisher(track, self.source)
        self._room.add_source(self.id, self.source)

    async def leave(self) -> None:
        if not self._forget():
            return
        if self._publisher is not None:
            await self._publisher.stop()
        self.mixed_audio.stop()

    def _subscribe(self, owner_id: str, source: PacketSource) -> None:
        if not self._closed:
            self.mixed_audio.add_source(owner_id, source)

    def _unsubscribe(self, owner_id: str) -> None:
        self.mixed_audio.remove_source(owner_id)

    def _deliver(self, event: dict[str, Any]) -> None:
        if not self._closed and self.on_event is not None:
            self.on_event(event)

    def _last_activity(self) -> float:
        return float("inf")  # lives as long as its owner (the call) says

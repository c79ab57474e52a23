"""The SFU contract used by signaling: :class:`Sfu`, rooms, participants.

Rooms are created by the first join and closed when the last participant leaves. Limits:
``max_participants_per_room`` (:class:`~kefu.sfu.errors.RoomFull`) and ``max_rooms`` per
node (:class:`~kefu.sfu.errors.SfuLimit`). Audio travels between participants as Opus
packets through :mod:`kefu.sfu.forward` (no decoding); in-process participants
(:meth:`Sfu.join_local`) hear a mix from :mod:`kefu.sfu.mixer`. Room events go to every
participant's ``on_event`` and, as JSON, to its ``kefu-events`` data channel.

Participants that vanish without ``leave()`` are removed when aiortc reports their
connection ``failed``/``closed`` (ICE consent, ~30 s), or by :meth:`Sfu.sweep`, which also
removes those that never connected and silent publishers (``idle_timeout_s``). An ``Sfu``
serves the rooms of one process; :mod:`kefu.mediaserver.room_workers` runs one per room
worker process and :mod:`kefu.signaling.shards` says which process hosts a room.
:meth:`Sfu.stats` gives counters and gauges for metrics export.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

from aiortc import MediaStreamTrack

from kefu.sfu import ice
from kefu.sfu.errors import DuplicateParticipant, RoomFull, SfuLimit
from kefu.sfu.forward import PacketSource, SfuCounters
from kefu.sfu.member import LocalParticipant, RoomMember
from kefu.sfu.participant import Participant
from kefu.sfu.video import VideoFanout

__all__ = ["LocalParticipant", "Participant", "PeerSettings", "Room", "RoomInfo", "Sfu"]

ROLES = frozenset({"customer", "agent", "supervisor", "admin", "bot", "sip"})


@dataclass(frozen=True, slots=True)
class PeerSettings:
    """Settings of every server-side peer connection (config section ``webrtc``)."""

    ice_servers: tuple[dict[str, Any], ...] = ()
    """RTCIceServer-like dicts (W3C webrtc-pc §4.2.1): urls, username, credential."""
    ice_host_addresses: tuple[str, ...] | None = None
    """Only these addresses become ICE host candidates (RFC 8445 §5.1.1.1); None = aioice's."""
    max_participants_per_room: int = 16
    """Join beyond this raises RoomFull."""
    max_rooms: int = 200
    """Creating a room beyond this raises SfuLimit."""
    idle_timeout_s: float = 30.0
    """sweep(): not connected, or publishing but silent, for this long means gone."""
    forward_queue: int = 50
    """Opus packets buffered per subscriber (1 s at 20 ms); the oldest are dropped beyond."""
    event_queue: int = 256
    """Room events buffered per participant until its data channel opens."""

    def __post_init__(self) -> None:
        if self.ice_host_addresses is not None:
            object.__setattr__(self, "ice_host_addresses", ice.validate(self.ice_host_addresses))
        if self.max_participants_per_room < 1 or self.max_rooms < 1:
            raise ValueError("PeerSettings: limits must be >= 1")


@dataclass(frozen=True, slots=True)
class RoomInfo:
    """A snapshot of one room for listings."""

    room_id: str
    """The room's id as given to join."""
    participants: tuple[tuple[str, str], ...]
    """(participant id, role) pairs in join order."""
    created_at: float
    """time.monotonic() of the first join."""


@dataclass(eq=False)
class Room:
    """Participants and their published sources; owned by :class:`Sfu`."""

    id: str
    clock: Callable[[], float]
    spawn: Callable[[Coroutine[Any, Any, None]], None]
    on_empty: Callable[[Room], None]
    created_at: float = 0.0
    members: dict[str, RoomMember] = field(default_factory=dict)
    sources: dict[str, PacketSource] = field(default_factory=dict)
    video_sources: dict[str, VideoFanout] = field(default_factory=dict)
    """Published videos (the avatar's, callers' cameras), sent to the members that ask."""
    closed: bool = False
    counters: SfuCounters = field(default_factory=SfuCounters)
    floor: Callable[[RoomMember], bool] | None = None
    """Who may be heard (None: everyone). Set by the call a room belongs to: a member it
    answers False for still receives everything, but its audio reaches nobody."""

    def apply_floor(self) -> None:
        """Mute or unmute every published source by :attr:`floor`."""
        for owner_id, source in self.sources.items():
            member = self.members.get(owner_id)
            source.muted = bool(member and self.floor and not self.floor(member))

    def sources_for(self, member_id: str) -> list[tuple[str, PacketSource]]:
        return [(owner, src) for owner, src in self.sources.items() if owner != member_id]

    def add_source(self, owner_id: str, source: PacketSource) -> None:
        self.sources[owner_id] = source
        member = self.members.get(owner_id)
        source.muted = bool(member and self.floor and not self.floor(member))
        for member in list(self.members.values()):
            if member.id != owner_id:
                member._subscribe(owner_id, source)

    def video_sources_for(self, member_id: str) -> list[tuple[str, VideoFanout]]:
        return [(owner, src) for owner, src in self.video_sources.items() if owner != member_id]

    def add_video_source(self, owner_id: str, fanout: VideoFanout) -> None:
        """Publish ``owner_id``'s video; members that asked for video get it at once."""
        old = self.video_sources.get(owner_id)
        if old is not None and old is not fanout:
            self._drop_video(owner_id)
        self.video_sources[owner_id] = fanout
        for member in list(self.members.values()):
            if member.id != owner_id:
                member._offer_video(owner_id, fanout)

    def remove_video_source(self, owner_id: str, fanout: VideoFanout) -> None:
        """``owner_id`` stopped publishing ``fanout`` (no-op if it has been replaced or left)."""
        if self.video_sources.get(owner_id) is fanout:
            self._drop_video(owner_id)

    def _drop_video(self, owner_id: str) -> None:
        fanout = self.video_sources.pop(owner_id, None)
        if fanout is not None:
            fanout.close()
            for other in list(self.members.values()):
                if isinstance(other, Participant) and owner_id in other.video:
                    other._unsubscribe(owner_id)

    def broadcast(self, event: dict[str, Any], *, sender: str | None) -> None:
        for member in list(self.members.values()):
            member._deliver(event)

    def broadcast_binary(self, data: bytes, *, sender: str | None) -> None:
        """``data`` to every other member's ``kefu-avatar`` channel (lossy, never queued)."""
        for member in list(self.members.values()):
            if member.id != sender:
                member._deliver_binary(data)

    def remove(self, member: RoomMember) -> None:
        if self.members.get(member.id) is not member:
            return
        del self.members[member.id]
        self.counters.participants_left += 1
        source = self.sources.pop(member.id, None)
        if source is not None:
            source.close()
        fanout = self.video_sources.pop(member.id, None)
        if fanout is not None:
            fanout.close()
        for other in list(self.members.values()):
            other._unsubscribe(member.id)
        self.broadcast({"type": "participant_left", "participant": member.id}, sender=None)
        if not self.members:
            self.closed = True
            self.on_empty(self)

    def info(self) -> RoomInfo:
        return RoomInfo(
            self.id, tuple((m.id, m.role) for m in self.members.values()), self.created_at
        )


class Sfu:
    """All rooms of this process (see module doc)."""

    def __init__(
        self, settings: PeerSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        ice.install()
        self.settings = settings
        self._clock = clock
        self._rooms: dict[str, Room] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.counters = SfuCounters()

    # --- the contract -------------------------------------------------------------------

    async def join(
        self, room_id: str, participant_id: str, *, role: str, display: str = "", user: str = ""
    ) -> Participant:
        room = self._admit(room_id, participant_id, role)
        participant = Participant(
            room,
            participant_id,
            role=role,
            display=display,
            settings=self.settings,
            now=self._clock(),
            user=user,
        )
        self._enter(room, participant)
        return participant

    async def join_local(
        self,
        room_id: str,
        participant_id: str,
        role: str,
        source: MediaStreamTrack | None,
        *,
        display: str = "",
        user: str = "",
        prompt_mix: bool = False,
    ) -> LocalParticipant:
        """Put an in-process track into the room, no peer connection (SIP legs, the AI).
        ``prompt_mix``: it hears the room as audio arrives, not paced for a loudspeaker (a
        recogniser: :class:`~kefu.sfu.mixer.AudioMixer`)."""
        room = self._admit(room_id, participant_id, role)
        participant = LocalParticipant(
            room, participant_id, role=role, display=display, user=user, prompt_mix=prompt_mix
        )
        self._enter(room, participant)
        for owner_id, src in room.sources_for(participant_id):
            participant._subscribe(owner_id, src)
        if source is not None:
            participant._start(source)
        return participant

    def room_exists(self, room_id: str) -> bool:
        return room_id in self._rooms

    def rooms(self) -> list[RoomInfo]:
        return [room.info() for room in self._rooms.values()]

    def room_ids(self) -> list[str]:
        """The rooms open now."""
        return list(self._rooms)

    def stats(self) -> dict[str, int]:
        """Metrics of this SFU: the :class:`~kefu.sfu.forward.SfuCounters` totals (counters:
        they only grow) plus ``rooms`` and ``participants`` (gauges: what is open now)."""
        out: dict[str, int] = asdict(self.counters)
        out["rooms"] = len(self._rooms)
        out["participants"] = sum(len(room.members) for room in self._rooms.values())
        return out

    def publish_video(self, room_id: str, owner_id: str, fanout: VideoFanout) -> bool:
        """Publish ``fanout`` as ``owner_id``'s video in ``room_id`` (False: no such member)."""
        room = self._rooms.get(room_id)
        if room is None or owner_id not in room.members:
            return False
        room.add_video_source(owner_id, fanout)
        return True

    def set_floor(self, room_id: str, floor: Callable[[RoomMember], bool] | None) -> None:
        """Who of ``room_id`` may be heard from now on (see :attr:`Room.floor`)."""
        room = self._rooms.get(room_id)
        if room is not None:
            room.floor = floor
            room.apply_floor()

    def apply_floor(self, room_id: str) -> None:
        """Re-read ``room_id``'s floor (the call it belongs to changed hands)."""
        room = self._rooms.get(room_id)
        if room is not None:
            room.apply_floor()

    def participant(self, room_id: str, participant_id: str) -> RoomMember | None:
        room = self._rooms.get(room_id)
        return room.members.get(participant_id) if room else None

    async def sweep(self, now: float | None = None) -> int:
        """Remove participants gone quiet for ``idle_timeout_s``; returns how many."""
        now = self._clock() if now is None else now
        limit = self.settings.idle_timeout_s
        stale: list[Any] = []
        for room in list(self._rooms.values()):
            for member in list(room.members.values()):
                if isinstance(member, Participant):
                    quiet = now - member._last_activity() > limit
                    silent_publisher = (
                        member.source is not None
                        and now - (member.source.last_packet_at or member._state_since) > limit
                    )
                    if (member.state != "connected" and quiet) or silent_publisher:
                        stale.append(member)
        for member in stale:
            await member.leave()
        return len(stale)

    async def close(self) -> None:
        self._closed = True
        for room in list(self._rooms.values()):
            for member in list(room.members.values()):
                await member.leave()  # type: ignore[attr-defined]
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- internals ----------------------------------------------------------------------

    def _admit(self, room_id: str, participant_id: str, role: str) -> Room:
        if self._closed:
            raise SfuLimit("the SFU is shutting down")
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        room = self._rooms.get(room_id)
        if room is None:
            if len(self._rooms) >= self.settings.max_rooms:
                raise SfuLimit(f"node already hosts {self.settings.max_rooms} rooms")
            room = Room(
                room_id,
                self._clock,
                self._spawn,
                self._drop_room,
                self._clock(),
                counters=self.counters,
            )
            self._rooms[room_id] = room
        elif participant_id in room.members:
            raise DuplicateParticipant(f"{participant_id} is already in room {room_id}")
        elif len(room.members) >= self.settings.max_participants_per_room:
            raise RoomFull(
                f"room {room_id} already has {self.settings.max_participants_per_room} participants"
            )
        return room

    def _enter(self, room: Room, member: RoomMember) -> None:
        room.broadcast(
            {"type": "participant_joined", "participant": member.id, "role": member.role},
            sender=None,
        )
        room.members[member.id] = member
        self.counters.participants_joined += 1

    def _drop_room(self, room: Room) -> None:
        if self._rooms.get(room.id) is room:
            del self._rooms[room.id]

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

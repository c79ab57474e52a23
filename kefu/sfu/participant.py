"""Participants of a room: :class:`Participant` (a browser over an aiortc peer connection)
here, and :class:`~kefu.sfu.member.LocalParticipant` (an in-process track, e.g. a SIP leg or
the AI agent) in :mod:`kefu.sfu.member`, beside their base :class:`~kefu.sfu.member.RoomMember`.

Signaling states (RFC 8829 §3.2, as aiortc implements them) allowed per call:

    handle_offer   stable            -> stable   (answer returned)
    create_offer   stable            -> have-local-offer
    handle_answer  have-local-offer  -> stable

Anything else raises :class:`~kefu.sfu.errors.BadSignalingState`. Invariants: a participant
subscribes to every other participant's audio source exactly once; an answer holds only the
m-sections of the offer it answers (sources beyond the offer's idle audio m-sections are
added afterwards); renegotiation is requested only in ``stable`` and once connected
(otherwise it is remembered and requested then), at most once per loop turn; every offer
kefu makes keeps the payload types and extmap ids negotiated so far (:mod:`.stable_ids`);
``leave()`` is idempotent and, once done, no task, track, socket or channel of it remains.

``on_ice_candidate`` may be called *inside* ``handle_offer``/``create_offer`` (aiortc gathers
in setLocalDescription), before the description is returned: the caller holds such
candidates until it has sent the description (kefu.signaling.hub does).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.sdp import candidate_from_sdp

from kefu.sfu import ice, stable_ids
from kefu.sfu.camera import CameraPublisher
from kefu.sfu.errors import BadCandidate, BadSdp, BadSignalingState, ParticipantGone
from kefu.sfu.forward import DropOldest, EncodedTrack, PacketSource, tap_receiver
from kefu.sfu.member import RoomMember
from kefu.sfu.video import VideoFanout, VideoTrack

if TYPE_CHECKING:
    from kefu.sfu.api import PeerSettings, Room

EVENTS_LABEL = "kefu-events"
AVATAR_LABEL = "kefu-avatar"
"""Binary avatar frames (docs/avatar.md); the client creates it unordered, no retransmits."""
AVATAR_MAX_BUFFERED = 16 * 1024
"""A frame is dropped (and counted) while the avatar channel holds more unsent bytes."""
AVATAR_MODES = ("video", "weights", "off")
"""What a client asks of the avatar with ``{"type": "avatar.mode", "mode": …}`` on its events
channel: the rendered video track (and the weights), the weights only, or nothing."""
MAX_SDP = 64 * 1024
_SDP_LINE = re.compile(r"^[a-z]=[^\x00-\x08\x0b\x0c\x0e-\x1f]*$")


def check_sdp(sdp: object, kind: str) -> str:
    """Cheap hostile-input checks before aiortc's parser sees the text."""
    if not isinstance(sdp, str):
        raise BadSdp(f"{kind}: SDP must be a string")
    if len(sdp) > MAX_SDP:
        raise BadSdp(f"{kind}: SDP of {len(sdp)} bytes exceeds {MAX_SDP}")
    lines = [line for line in sdp.replace("\r\n", "\n").split("\n") if line]
    if not lines or lines[0] != "v=0":
        raise BadSdp(f"{kind}: SDP must start with v=0 (RFC 8866 §5)")
    for number, line in enumerate(lines, 1):
        if not _SDP_LINE.match(line):
            raise BadSdp(f"{kind}: SDP line {number} is not <type>=<value> (RFC 8866 §5)")
    if not any(line.startswith("m=") for line in lines):
        raise BadSdp(f"{kind}: SDP has no media section")
    return sdp


class Participant(RoomMember):
    """A WebRTC participant: one server-side ``RTCPeerConnection`` (see module doc)."""

    def __init__(
        self,
        room: Room,
        participant_id: str,
        *,
        role: str,
        display: str,
        settings: PeerSettings,
        now: float,
        user: str = "",
    ) -> None:
        super().__init__(room, participant_id, role=role, display=display, user=user)
        self.on_ice_candidate: Callable[[dict[str, Any] | None], None] | None = None
        self.on_renegotiation_needed: Callable[[], None] | None = None
        self.on_state: Callable[[str], None] | None = None
        self.state = "new"
        self.subscriptions: dict[str, tuple[RTCRtpSender, EncodedTrack]] = {}
        self.events_dropped = 0
        self.avatar_dropped = 0
        """Avatar frames not sent because the channel was closed or backed up."""
        self._avatar: RTCDataChannel | None = None
        self.avatar_mode = "weights"
        """What this client asked of the avatar (:data:`AVATAR_MODES`); video only on request."""
        self.video: dict[str, tuple[RTCRtpSender, VideoTrack]] = {}
        """The room's published videos this client receives, by publisher."""
        self.camera: CameraPublisher | None = None
        """This client's own video (one track at a time), published to the room."""
        self._settings = settings
        self._state_since = now
        self._renegotiate_pending = False
        self._renegotiation_scheduled = False
        self._channel: RTCDataChannel | None = None
        self._outbox: DropOldest[str] = DropOldest(settings.event_queue)
        servers = [RTCIceServer(**server) for server in settings.ice_servers]
        # iceServers always explicit: aiortc's default is a public Google STUN server
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._adopt_channel)
        self.pc.on("connectionstatechange", self._on_connection_state)

    # --- the contract -------------------------------------------------------------------

    async def handle_offer(self, sdp: str) -> str:
        self._check_open()
        check_sdp(sdp, "offer")
        if self.pc.signalingState != "stable":
            raise BadSignalingState(f"offer received in state {self.pc.signalingState}")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise BadSdp(f"offer rejected: {exc or type(exc).__name__}") from exc
        except Exception as exc:  # aiortc's InvalidAccessError etc. are not ValueErrors
            raise BadSdp(f"offer rejected: {type(exc).__name__}: {exc}") from exc
        self._check_open()
        # An answer may only hold the offer's own m-sections: a transceiver that addTrack
        # creates now has no mid and makes aiortc's setLocalDescription fail ("None is not in
        # list"). So sources go onto the offer's idle audio m-sections first (heard at once,
        # no renegotiation); the rest are subscribed after the answer and sent in a server
        # offer (on_renegotiation_needed).
        later = self._room.sources_for(self.id)
        while later and self._idle_offered_audio():
            self._subscribe(*later.pop(0))
        if self._channel is None:
            self._adopt_channel(self.pc.createDataChannel(EVENTS_LABEL))
        answer = await self.pc.createAnswer()
        with ice.host_addresses(self._settings.ice_host_addresses):
            await self.pc.setLocalDescription(answer)
        self._check_open()
        for owner_id, source in later:
            if self._room.sources.get(owner_id) is source:  # it may have left meanwhile
                self._subscribe(owner_id, source)
        # transceivers or a channel the offer did not have need a server-side offer
        if any(t.mid is None for t in self.pc.getTransceivers()) or self._channel_unnegotiated():
            self._renegotiate_pending = True
        self._after_stable()
        self._candidates_done()
        return str(self.pc.localDescription.sdp)

    async def create_offer(self) -> str:
        self._check_open()
        if self.pc.signalingState != "stable":
            raise BadSignalingState(f"cannot offer in state {self.pc.signalingState}")
        self._renegotiate_pending = False
        offer = await stable_ids.create_offer(self.pc)
        with ice.host_addresses(self._settings.ice_host_addresses):
            await self.pc.setLocalDescription(offer)
        self._candidates_done()
        return str(self.pc.localDescription.sdp)

    async def handle_answer(self, sdp: str) -> None:
        self._check_open()
        check_sdp(sdp, "answer")
        if self.pc.signalingState != "have-local-offer":
            raise BadSignalingState(f"answer received in state {self.pc.signalingState}")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))
        except Exception as exc:
            raise BadSdp(f"answer rejected: {type(exc).__name__}: {exc}") from exc
        self._after_stable()

    async def add_ice_candidate(self, candidate: dict[str, Any] | None) -> None:
        self._check_open()
        if candidate is None or not candidate.get("candidate"):
            return  # aiortc ends remote candidates itself once ICE completes
        text = candidate["candidate"]
        if not isinstance(text, str) or len(text) > 1024:
            raise BadCandidate("candidate must be a string of at most 1024 characters")
        try:
            parsed = candidate_from_sdp(text.removeprefix("candidate:"))
        except (ValueError, IndexError, AssertionError) as exc:  # aiortc asserts the arity
            raise BadCandidate(f"unparsable candidate: {text[:80]!r}") from exc
        parsed.sdpMid = candidate.get("sdpMid")
        parsed.sdpMLineIndex = candidate.get("sdpMLineIndex")
        try:
            await self.pc.addIceCandidate(parsed)
        except Exception as exc:
            raise BadCandidate(f"candidate rejected: {exc}") from exc

    async def leave(self) -> None:
        if not self._forget():
            return
        if self.source is not None:
            self.source.close()
        for _, track in self.subscriptions.values():
            track.stop()
        self.subscriptions.clear()
        for _, video in self.video.values():
            video.stop()
        self.video.clear()
        if self.camera is not None:
            await self.camera.stop()
        self._outbox.close()
        await self.pc.close()
        self._set_state("closed")

    # --- room side ----------------------------------------------------------------------

    def _subscribe(self, owner_id: str, source: PacketSource) -> None:
        if owner_id in self.subscriptions or self._closed:
            return
        queue = source.subscribe()
        holder: list[RTCRtpSender] = []

        def negotiated() -> str | None:
            for transceiver in self.pc.getTransceivers():
                if holder and transceiver.sender is holder[0]:
                    codecs = getattr(transceiver, "_codecs", [])
                    return str(codecs[0].mimeType) if codecs else None
            return None

        track = EncodedTrack(
            queue,
            negotiated,
            on_stop=lambda: source.unsubscribe(queue),
            counters=self._room.counters,
        )
        sender = self.pc.addTrack(track)
        holder.append(sender)
        self.subscriptions[owner_id] = (sender, track)
        if self.pc.signalingState == "stable" and self.pc.remoteDescription is not None:
            self._request_renegotiation()

    def _unsubscribe(self, owner_id: str) -> None:
        entries: list[tuple[RTCRtpSender, MediaStreamTrack]] = []
        for subscribed in (self.subscriptions, self.video):
            entry = subscribed.pop(owner_id, None)
            if entry is not None:
                entries.append(entry)
        if not entries or self._closed:
            return
        for sender, track in entries:
            track.stop()
            # aiortc has no removeTrack: free the sender (addTrack may reuse it), stop sending
            sender.replaceTrack(None)
            for transceiver in self.pc.getTransceivers():
                if transceiver.sender is sender:
                    receiving = transceiver.direction in ("sendrecv", "recvonly")
                    transceiver.direction = "recvonly" if receiving else "inactive"
        self._request_renegotiation()

    def _deliver(self, event: dict[str, Any]) -> None:
        if self._closed:
            return
        if self.on_event is not None:
            self.on_event(event)
        self._outbox.put(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
        self._flush_events()

    def _deliver_binary(self, data: bytes) -> None:
        channel = self._avatar
        if self._closed or channel is None or self.avatar_mode == "off":
            return
        # a stale frame is worth nothing: never queue behind a subscriber that does not read
        if channel.readyState != "open" or channel.bufferedAmount > AVATAR_MAX_BUFFERED:
            self.avatar_dropped += 1
            return
        channel.send(data)

    def _offer_video(self, owner_id: str, fanout: VideoFanout) -> None:
        if self.avatar_mode == "video":
            self._want_video(owner_id, fanout, True)

    def set_avatar_mode(self, mode: str) -> None:
        """Follow the client's ``avatar.mode``: subscribe to the room's videos on the first
        "video" (a server offer adds the track), pause or resume them after that."""
        if mode not in AVATAR_MODES or self._closed:
            return
        self.avatar_mode = mode
        for owner_id, fanout in self._room.video_sources_for(self.id):
            self._want_video(owner_id, fanout, mode == "video")

    def _want_video(self, owner_id: str, fanout: VideoFanout, wanted: bool) -> None:
        entry = self.video.get(owner_id)
        if entry is not None:
            fanout.set_wanted(entry[1], wanted)
            return
        if not wanted:
            return
        if self.state != "connected":
            # A transceiver added before the connection is up gets a transport of its own that
            # holds aiortc's connectionState at "connecting"; _on_connection_state comes back.
            return
        track = fanout.subscribe()
        sender = self.pc.addTrack(track)
        self.video[owner_id] = (sender, track)
        self._request_renegotiation()

    def _last_activity(self) -> float:
        packet_at = self.source.last_packet_at if self.source else None
        return max(self._state_since, packet_at or 0.0)

    # --- aiortc callbacks ---------------------------------------------------------------

    def _on_track(self, track: Any) -> None:
        for transceiver in self.pc.getTransceivers():
            if transceiver.receiver.track is track:
                if track.kind == "audio" and self.source is None:
                    self.source = PacketSource(
                        self.id,
                        queue_len=self._settings.forward_queue,
                        clock=self._room.clock,
                        counters=self._room.counters,
                    )
                    tap_receiver(transceiver.receiver, transceiver, self.source)
                    self._room.add_source(self.id, self.source)
                elif track.kind == "video" and not self._closed and not self._has_camera():
                    self.camera = CameraPublisher(
                        self.id, track, transceiver.receiver, on_end=self._camera_ended
                    )
                    self._room.add_video_source(self.id, self.camera.fanout)
                else:
                    tap_receiver(transceiver.receiver, transceiver, None)

    def _has_camera(self) -> bool:
        return self.camera is not None and not self.camera.ended

    def _camera_ended(self, camera: CameraPublisher) -> None:
        self._room.remove_video_source(self.id, camera.fanout)

    def _adopt_channel(self, channel: RTCDataChannel) -> None:
        if channel.label == AVATAR_LABEL and not self._closed:
            if self._avatar is not None and self._avatar is not channel:
                self._avatar.close()
            self._avatar = channel  # send-only: what the client sends on it is ignored
            return
        if channel.label != EVENTS_LABEL or self._closed:
            return
        if self._channel is not None and self._channel is not channel:
            self._channel.close()
        self._channel = channel
        channel.on("open", self._flush_events)
        channel.on("message", self._on_channel_message)
        self._flush_events()

    def _on_channel_message(self, message: Any) -> None:
        if not isinstance(message, str) or len(message) > 16 * 1024:
            return
        try:
            event = json.loads(message)
        except ValueError:
            return
        if isinstance(event, dict) and event.get("type") == "avatar.mode":
            self.set_avatar_mode(str(event.get("mode")))
            return  # a request to the server, not news for the room
        if isinstance(event, dict):
            # the browser cannot speak for someone else
            self._room.broadcast({**event, "from": self.id}, sender=self.id)

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        if state == "connecting" and self.state == "connected":
            # aiortc counts the transport of a transceiver added for a renegotiation (not yet
            # bundled) as connecting: the live connection has not gone anywhere.
            return
        if state in ("connecting", "connected", "failed", "closed"):
            self._set_state(state)
        if state == "connected":
            if self.avatar_mode == "video" and self._room.video_sources_for(self.id):
                self.set_avatar_mode("video")
            self._after_stable()
        if state in ("failed", "closed") and not self._closed:
            self._room.spawn(self.leave())

    # --- helpers ------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        self._state_since = self._room.clock()
        if self.on_state is not None:
            self.on_state(state)

    def _flush_events(self) -> None:
        channel = self._channel
        if channel is None or channel.readyState != "open":
            return
        while (message := self._outbox.get_nowait()) is not None:
            channel.send(message)
        self.events_dropped = self._outbox.dropped

    def _channel_unnegotiated(self) -> bool:
        remote = self.pc.remoteDescription
        return self._channel is not None and (remote is None or "m=application" not in remote.sdp)

    def _request_renegotiation(self) -> None:
        self._renegotiate_pending = True
        if self.pc.signalingState == "stable" and self.pc.remoteDescription is not None:
            self._after_stable()

    def _after_stable(self) -> None:
        if self._renegotiate_pending and not self._renegotiation_scheduled:
            # once per loop turn however many tracks changed, and after the caller has sent
            # the answer it is busy returning
            self._renegotiation_scheduled = True
            asyncio.get_running_loop().call_soon(self._fire_renegotiation)

    def _fire_renegotiation(self) -> None:
        self._renegotiation_scheduled = False
        if self._closed or not self._renegotiate_pending or self.on_renegotiation_needed is None:
            return
        if self.pc.signalingState != "stable":
            return  # pending stays set: handle_answer / create_offer take it from here
        if self.state != "connected":
            # Until ICE and DTLS are up the client may not have applied our answer yet (an
            # offer overtaking it breaks clients that do not queue signaling operations);
            # being connected proves it has: _on_connection_state tries again then.
            return
        self._renegotiate_pending = False
        self.on_renegotiation_needed()

    def _idle_offered_audio(self) -> bool:
        """Would addTrack reuse a transceiver of the remote offer (not create one)?"""
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "audio" and transceiver.sender.track is None:
                # addTrack takes the first such transceiver, whatever its mid
                return transceiver.mid is not None and not transceiver.stopped
        return False

    def _candidates_done(self) -> None:
        # aiortc gathers before setLocalDescription returns: all candidates are in the SDP
        if self.on_ice_candidate is not None:
            self.on_ice_candidate(None)

    def _check_open(self) -> None:
        if self._closed:
            raise ParticipantGone(f"participant {self.id} has left room {self.room_id}")

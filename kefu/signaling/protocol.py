"""The signaling wire protocol, version 1: one JSON object per WebSocket text message.

Every message is ``{"v": 1, "type": "<type>", ...fields}``. Unknown extra fields are ignored
so that later minor additions do not break old servers; a different ``v`` is rejected.
Each message type is a frozen dataclass; :func:`parse_client` / :func:`parse_server` turn
text into one, :func:`serialize` turns one back into text. Failures raise
:class:`~kefu.signaling.errors.ProtocolError` with a stable ``code``: ``too_large`` (over
:data:`MAX_MESSAGE_BYTES`), ``bad_json``, ``unknown_type``, ``bad_message``; nothing else
escapes, whatever the input (nesting too deep for the decoder, huge numbers, wrong types).
Strings must be valid Unicode: a lone surrogate (``"\\ud800"`` is valid JSON) is refused,
because it could never be encoded back into a text frame for the other participants.

ICE candidates use the browser's RTCIceCandidateInit shape (W3C webrtc-pc section 4.8.1.1);
``null`` means end of candidates (RFC 8838 section 4.4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kefu.signaling.errors import ProtocolError

VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024

JsonObject = dict[str, Any]


# --- shared shapes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IceCandidate:
    """One trickled ICE candidate (webrtc-pc RTCIceCandidateInit)."""

    candidate: str
    """The ``candidate:`` attribute line without ``a=`` (RFC 8839 section 5.1)."""
    sdp_mid: str | None = None
    """The media stream identification tag (RFC 8843 / ``sdpMid``)."""
    sdp_mline_index: int | None = None
    """Index of the m-line the candidate belongs to (``sdpMLineIndex``)."""

    def to_json(self) -> JsonObject:
        return {
            "candidate": self.candidate,
            "sdpMid": self.sdp_mid,
            "sdpMLineIndex": self.sdp_mline_index,
        }

    @classmethod
    def from_json(cls, value: object) -> IceCandidate:
        if not isinstance(value, dict):
            raise ProtocolError("candidate must be an object or null")
        text = value.get("candidate")
        mid = value.get("sdpMid")
        index = value.get("sdpMLineIndex")
        if not isinstance(text, str) or not _is_unicode(text):
            raise ProtocolError("candidate.candidate must be a string")
        if mid is not None and not (isinstance(mid, str) and _is_unicode(mid) and len(mid) <= 256):
            raise ProtocolError("candidate.sdpMid must be a string (at most 256) or null")
        if index is not None and (
            not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= 0xFFFF
        ):
            raise ProtocolError("candidate.sdpMLineIndex must be an integer 0-65535 or null")
        if mid is None and index is None:
            raise ProtocolError("candidate needs sdpMid or sdpMLineIndex")
        return cls(text, mid, index)


@dataclass(frozen=True, slots=True)
class ParticipantInfo:
    """What others in a room learn about a participant (no user ids, no tokens)."""

    id: str
    """Participant id, unique in the room."""
    role: str
    """customer | agent | supervisor | admin."""
    display: str = ""
    """Display name the participant chose when joining."""

    def to_json(self) -> JsonObject:
        return {"id": self.id, "role": self.role, "display": self.display}

    @classmethod
    def from_json(cls, value: object) -> ParticipantInfo:
        if not isinstance(value, dict):
            raise ProtocolError("participant must be an object")
        pid, role, display = value.get("id"), value.get("role"), value.get("display", "")
        if not (isinstance(pid, str) and isinstance(role, str) and isinstance(display, str)):
            raise ProtocolError("participant needs string id, role and display")
        if not (_is_unicode(pid) and _is_unicode(role) and _is_unicode(display)):
            raise ProtocolError("participant id, role and display must be valid Unicode")
        return cls(pid, role, display)


# --- messages --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Join:
    """client→server: join (or create) a room."""

    TYPE: ClassVar[str] = "join"
    room: str
    """Room id; 1-128 printable characters."""
    display: str = ""
    """Display name shown to the other participants."""


@dataclass(frozen=True, slots=True)
class Offer:
    """Both ways: an SDP offer (RFC 8829 section 5.2). Server→client means renegotiation."""

    TYPE: ClassVar[str] = "offer"
    sdp: str
    """The offer SDP (RFC 8866)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """Both ways: an SDP answer (RFC 8829 section 5.3)."""

    TYPE: ClassVar[str] = "answer"
    sdp: str
    """The answer SDP (RFC 8866)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Both ways: a trickled ICE candidate, or None for end of candidates (RFC 8838)."""

    TYPE: ClassVar[str] = "candidate"
    candidate: IceCandidate | None
    """The candidate; None = no more candidates for this generation."""


@dataclass(frozen=True, slots=True)
class Leave:
    """client→server: leave the room for good (no resume)."""

    TYPE: ClassVar[str] = "leave"


@dataclass(frozen=True, slots=True)
class Ping:
    """client→server: heartbeat; the server answers pong."""

    TYPE: ClassVar[str] = "ping"


@dataclass(frozen=True, slots=True)
class Resume:
    """client→server: re-attach a dropped session within the grace period."""

    TYPE: ClassVar[str] = "resume"
    session: str
    """Session id from the ``joined`` message."""
    token: str
    """A currently valid JWT of the same user."""


@dataclass(frozen=True, slots=True)
class Joined:
    """server→client: the join (or resume) succeeded."""

    TYPE: ClassVar[str] = "joined"
    session: str
    """Opaque session id to resume with."""
    participant: str
    """This client's participant id."""
    room: str
    """The room joined."""
    ice_servers: tuple[JsonObject, ...]
    """RTCIceServer dicts (urls, username, credential) for RTCPeerConnection."""
    participants: tuple[ParticipantInfo, ...] = ()
    """The others already in the room."""
    heartbeat_s: float = 10.0
    """How often the client should ping; silence for longer than the server's timeout closes."""


@dataclass(frozen=True, slots=True)
class ParticipantJoined:
    """server→client: someone joined the room."""

    TYPE: ClassVar[str] = "participant_joined"
    participant: ParticipantInfo
    """Who joined."""


@dataclass(frozen=True, slots=True)
class ParticipantLeft:
    """server→client: someone left the room (or their resume grace ran out)."""

    TYPE: ClassVar[str] = "participant_left"
    participant: str
    """Id of the participant who left."""


@dataclass(frozen=True, slots=True)
class Event:
    """server→client: a room event (transcript, call state...) as published by the room."""

    TYPE: ClassVar[str] = "event"
    event: JsonObject = field(default_factory=dict)
    """The event object, passed through unchanged."""


@dataclass(frozen=True, slots=True)
class Pong:
    """server→client: answer to ping."""

    TYPE: ClassVar[str] = "pong"


@dataclass(frozen=True, slots=True)
class Error:
    """server→client: a request failed; ``code`` is stable, ``message`` is for humans."""

    TYPE: ClassVar[str] = "error"
    code: str
    """Stable error code (docs/signaling.md lists them)."""
    message: str = ""
    """Human-readable detail; never contains room state or secrets."""


@dataclass(frozen=True, slots=True)
class Bye:
    """server→client: the session is over; the server closes the socket next."""

    TYPE: ClassVar[str] = "bye"
    reason: str = ""
    """Why: left, timeout, shutdown, failed, replaced."""


ClientMessage = Join | Offer | Answer | Candidate | Leave | Ping | Resume
ServerMessage = (
    Joined
    | Answer
    | Offer
    | Candidate
    | ParticipantJoined
    | ParticipantLeft
    | Event
    | Pong
    | Error
    | Bye
)
Message = ClientMessage | ServerMessage


# --- serialize -------------------------------------------------------------------------------


def to_json(message: Message) -> JsonObject:
    """The message as a JSON-ready dict (with ``v`` and ``type``)."""
    out: JsonObject = {"v": VERSION, "type": message.TYPE}
    match message:
        case Join(room, display):
            out.update(room=room, display=display)
        case Offer(sdp) | Answer(sdp):
            out["sdp"] = sdp
        case Candidate(candidate):
            out["candidate"] = None if candidate is None else candidate.to_json()
        case Resume(session, token):
            out.update(session=session, token=token)
        case Joined():
            out.update(
                session=message.session,
                participant=message.participant,
                room=message.room,
                ice_servers=[dict(s) for s in message.ice_servers],
                participants=[p.to_json() for p in message.participants],
                heartbeat_s=message.heartbeat_s,
            )
        case ParticipantJoined(participant):
            out["participant"] = participant.to_json()
        case ParticipantLeft(participant):
            out["participant"] = participant
        case Event(event):
            out["event"] = event
        case Error(code, text):
            out.update(code=code, message=text)
        case Bye(reason):
            out["reason"] = reason
        case Leave() | Ping() | Pong():
            pass
    return out


def serialize(message: Message) -> str:
    """The message as compact JSON text."""
    return json.dumps(to_json(message), separators=(",", ":"), ensure_ascii=False)


# --- parse -----------------------------------------------------------------------------------


def _is_unicode(text: str) -> bool:
    """No lone surrogates: the text can be sent on as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _str(obj: JsonObject, key: str, *, default: str | None = None, limit: int = 0) -> str:
    value = obj.get(key, default)
    kind = obj["type"]  # a known type by now (_parse looked it up)
    if not isinstance(value, str):
        raise ProtocolError(f"{kind}: field {key!r} must be a string")
    if limit and not 0 < len(value) <= limit:
        raise ProtocolError(f"{kind}: field {key!r} must be 1-{limit} characters")
    if not _is_unicode(value):
        raise ProtocolError(f"{kind}: field {key!r} is not valid Unicode (lone surrogate)")
    return value


def _candidate(obj: JsonObject) -> Candidate:
    if "candidate" not in obj:
        raise ProtocolError("candidate: field 'candidate' is missing (use null to end)")
    value = obj["candidate"]
    return Candidate(None if value is None else IceCandidate.from_json(value))


def _room(obj: JsonObject) -> str:
    room = _str(obj, "room", limit=128)
    if not room.isprintable():
        raise ProtocolError("join: room must be printable")
    return room


def _display(obj: JsonObject) -> str:
    display = _str(obj, "display", default="")
    if len(display) > 64:
        raise ProtocolError("join: display must be at most 64 characters")
    return display


def _joined(obj: JsonObject) -> Joined:
    servers = obj.get("ice_servers", [])
    people = obj.get("participants", [])
    heartbeat = obj.get("heartbeat_s", 10.0)
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ProtocolError("joined: ice_servers must be a list of objects")
    if not isinstance(people, list):
        raise ProtocolError("joined: participants must be a list")
    if not isinstance(heartbeat, int | float) or isinstance(heartbeat, bool):
        raise ProtocolError("joined: heartbeat_s must be a number")
    return Joined(
        _str(obj, "session"),
        _str(obj, "participant"),
        _str(obj, "room"),
        tuple(servers),
        tuple(ParticipantInfo.from_json(p) for p in people),
        float(heartbeat),
    )


def _event(obj: JsonObject) -> Event:
    event = obj.get("event")
    if not isinstance(event, dict):
        raise ProtocolError("event: field 'event' must be an object")
    return Event(event)


_CLIENT: dict[str, Any] = {
    "join": lambda o: Join(_room(o), _display(o)),
    "offer": lambda o: Offer(_str(o, "sdp")),
    "answer": lambda o: Answer(_str(o, "sdp")),
    "candidate": _candidate,
    "leave": lambda o: Leave(),
    "ping": lambda o: Ping(),
    "resume": lambda o: Resume(_str(o, "session", limit=128), _str(o, "token", limit=8192)),
}

_SERVER: dict[str, Any] = {
    "joined": _joined,
    "answer": _CLIENT["answer"],
    "offer": _CLIENT["offer"],
    "candidate": _candidate,
    "participant_joined": lambda o: ParticipantJoined(
        ParticipantInfo.from_json(o.get("participant"))
    ),
    "participant_left": lambda o: ParticipantLeft(_str(o, "participant")),
    "event": _event,
    "pong": lambda o: Pong(),
    "error": lambda o: Error(_str(o, "code"), _str(o, "message", default="")),
    "bye": lambda o: Bye(_str(o, "reason", default="")),
}


def _decode(data: str | bytes) -> JsonObject:
    size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"message of {size} bytes exceeds {MAX_MESSAGE_BYTES}", code="too_large"
        )
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        raise ProtocolError("message is not valid JSON", code="bad_json") from None
    if not isinstance(obj, dict):
        raise ProtocolError("message must be a JSON object", code="bad_json")
    version = obj.get("v")
    if version != VERSION or isinstance(version, bool):
        # Only scalars are echoed, and briefly: a deeply nested value would not even repr().
        shown = repr(version)[:16] if isinstance(version, int | float | str) else "given"
        raise ProtocolError(f"unsupported protocol version {shown}; expected {VERSION}")
    if not isinstance(obj.get("type"), str):
        raise ProtocolError("field 'type' must be a string")
    return obj


def _parse(data: str | bytes, table: dict[str, Any], direction: str) -> Any:
    obj = _decode(data)
    build = table.get(obj["type"])
    if build is None:
        raise ProtocolError(
            f"unknown {direction} message type {obj['type'][:40]!r}", code="unknown_type"
        )
    return build(obj)


def parse_client(data: str | bytes) -> ClientMessage:
    """Parse a client→server message; raises ProtocolError."""
    message: ClientMessage = _parse(data, _CLIENT, "client")
    return message


def parse_server(data: str | bytes) -> ServerMessage:
    """Parse a server→client message (clients and tests use this); raises ProtocolError."""
    message: ServerMessage = _parse(data, _SERVER, "server")
    return message

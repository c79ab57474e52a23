"""Errors of the SFU, each with a stable ``code`` that signaling puts on the wire.

They sit under :mod:`kefu.errors`: limits and misuse are :class:`~kefu.errors.LocalError`
(the node is full, the participant is gone), bad offers/answers from a browser are
:class:`~kefu.errors.RemoteError` (via :class:`~kefu.errors.SdpError`).
"""

from __future__ import annotations

from kefu.errors import LocalError, RemoteError, SdpError


class RoomFull(LocalError):
    """The room already holds ``max_participants_per_room`` participants."""

    code = "room_full"


class SfuLimit(LocalError):
    """This node already hosts ``max_rooms`` rooms."""

    code = "node_full"


class ParticipantGone(LocalError):
    """The participant has left (or was swept); its peer connection is closed."""

    code = "participant_gone"


class DuplicateParticipant(LocalError):
    """A participant with this id is already in the room."""

    code = "duplicate_participant"


class BadSdp(SdpError):
    """An offer or answer was rejected before or by aiortc (size, syntax, no usable media)."""

    code = "bad_sdp"


class BadSignalingState(RemoteError):
    """The peer sent an offer/answer that the current signaling state does not allow."""

    code = "bad_signaling_state"


class BadCandidate(RemoteError, ValueError):
    """A trickled ICE candidate could not be parsed."""

    code = "bad_candidate"

"""The user agent's vocabulary: settings, advertised capabilities, and a call leg's table.

Leg state table (invariants): ``incoming`` → ``answered`` (2xx sent) → ``confirmed`` (ACK)
→ ``ended``; ``incoming`` → ``ended`` on reject or CANCEL; a re-INVITE's 2xx puts a confirmed
leg back to ``answered`` until its ACK. ``ended`` is final. A leg whose 2xx carried an offer
(delayed offer) holds it in ``pending_offer`` while ``answered``; the ACK either answers it
(``confirmed``) or the leg goes to ``ended`` with a BYE.

A leg kefu calls out on (UAC, :mod:`kefu.sip.ua_uac`, with ``outbound`` set) goes
``calling`` (INVITE sent) → ``early`` (a 1xx) → ``confirmed`` (2xx received and ACKed);
``calling``/``early`` → ``calling`` when the INVITE is sent again (401/407, 3xx);
``calling``/``early`` → ``cancelling`` when kefu gives up (ring timeout, hang-up) — the
CANCEL waits for a 1xx (RFC 3261 §9.1) — and from any of them → ``ended`` on a final
failure. A 2xx that arrives while ``cancelling`` is ACKed and at once ended with a BYE.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kefu.errors import InvalidTransition
from kefu.sip.delayed_offer import PendingOffer
from kefu.sip.dialog import Dialog, OkRetransmitter
from kefu.sip.message import Headers, Request
from kefu.sip.refer import ReferSubscription
from kefu.sip.session_timer import SessionTimer
from kefu.sip.transaction import (
    ClientTransaction,
    ServerInviteTransaction,
    ServerTransaction,
    TimerConfig,
)
from kefu.sip.ua_events import Peer

if TYPE_CHECKING:
    from kefu.mediaserver.config import Config
    from kefu.sip.uac import Outbound

ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, REFER, NOTIFY, UPDATE"
SUPPORTED = "timer, replaces, norefersub"
ACCEPT = "application/sdp, application/dtmf-relay, application/dtmf, message/sipfrag"
KNOWN_METHODS = frozenset(
    "INVITE ACK BYE CANCEL OPTIONS INFO REFER NOTIFY UPDATE REGISTER SUBSCRIBE "
    "MESSAGE PRACK PUBLISH".split()
)
DTMF_DIGITS = frozenset("0123456789*#ABCD")


@dataclass(frozen=True, slots=True)
class UaSettings:
    user_agent: str = "kefu/0.1"
    allow_from: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    auth_realm: str = "kefu"
    auth_users: tuple[tuple[str, str], ...] = ()
    auth_algorithm: str = "SHA-256"
    auth_secret: bytes = b""
    max_message_bytes: int = 65535
    session_expires: int = 1800
    min_se: int = 90
    timers: TimerConfig = TimerConfig()

    @classmethod
    def from_config(cls, config: Config) -> UaSettings:
        sip = config.sip
        return cls(
            allow_from=sip.allow_from,
            auth_realm=sip.auth_realm,
            auth_users=tuple(sip.auth_users.items()),
            auth_algorithm=sip.auth_algorithm,
            auth_secret=secrets.token_bytes(32),
            max_message_bytes=sip.max_message_bytes,
            session_expires=sip.session_expires,
            min_se=sip.min_se,
        )


@dataclass(eq=False)
class Leg:
    id: str
    invite: Request
    peer: Peer
    server_tx: ServerInviteTransaction | None
    state: str = "incoming"
    dialog: Dialog | None = None
    ok: OkRetransmitter | None = None
    session: SessionTimer | None = None
    session_headers: tuple[tuple[str, str], ...] = ()
    session_interval: int = 0
    session_we_refresh: bool = False
    reinvite_tx: ServerTransaction | None = None
    reinvite: Request | None = None
    refer: ReferSubscription | None = None
    pending_offer: PendingOffer | None = None
    """The offer our last 2xx carried, until its ACK answers it (delayed offer)."""
    client_txs: dict[ClientTransaction, str] = field(default_factory=dict)
    outbound: Outbound | None = None
    """The UAC state of a call kefu placed (None: an incoming call)."""


LEG_TABLE = {
    ("incoming", "answer"): "answered",
    ("incoming", "end"): "ended",
    ("answered", "ack"): "confirmed",
    ("answered", "end"): "ended",
    ("confirmed", "ack"): "confirmed",
    ("confirmed", "end"): "ended",
    ("ended", "end"): "ended",
    # calls kefu places (UAC)
    ("calling", "provisional"): "early",
    ("early", "provisional"): "early",
    ("cancelling", "provisional"): "cancelling",
    ("calling", "retry"): "calling",
    ("early", "retry"): "calling",
    ("calling", "cancel"): "cancelling",
    ("early", "cancel"): "cancelling",
    ("calling", "accept"): "confirmed",
    ("early", "accept"): "confirmed",
    ("cancelling", "accept"): "confirmed",
    ("calling", "end"): "ended",
    ("early", "end"): "ended",
    ("cancelling", "end"): "ended",
}


def advance(leg: Leg, event: str) -> None:
    nxt = LEG_TABLE.get((leg.state, event))
    if nxt is None:
        raise InvalidTransition("leg", leg.state, event)
    leg.state = nxt


def replace_top_via(msg: Request, top: str) -> Headers:
    vias = msg.headers.get_all("Via")
    headers = msg.headers.remove("Via")
    for value in reversed([top, *vias[1:]]):
        headers = headers.prepend("Via", value)
    return headers


def dtmf_from_info(req: Request) -> str | None:
    """The digit in an INFO body: ``Signal=5`` (dtmf-relay) or ``5`` (application/dtmf)."""
    ctype = (req.content_type or "").lower()
    text = req.body.decode("utf-8", "replace").strip()
    if ctype.startswith("application/dtmf-relay"):
        for line in text.splitlines():
            name, _, value = line.partition("=")
            if name.strip().lower() == "signal":
                text = value.strip()
                break
        else:
            return None
    elif not ctype.startswith("application/dtmf"):
        return None
    digit = text.upper()
    return digit if digit in DTMF_DIGITS else None

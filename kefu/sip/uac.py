"""What kefu does as the caller (UAC, RFC 3261 §8.1, §13.2), decided without I/O.

:class:`DialSpec` says whom to call and how; :class:`Outbound` is one outbound INVITE's state
beside its leg (:mod:`kefu.sip.ua_leg`); the functions decide what a final non-2xx response
leads to — another INVITE (:class:`Retry`) or the end of the attempt (:class:`Failure`):

* **401 / 407** (RFC 3261 §22.2, §22.3): the INVITE is sent once more, with CSeq + 1 and a new
  branch, carrying ``Authorization`` / ``Proxy-Authorization`` computed from the challenge
  (:func:`kefu.sip.auth.answer_challenge`: MD5, SHA-256, SHA-512-256, their ``-sess``
  forms, ``qop=auth``, ``nc`` per nonce and a random ``cnonce``). Of several challenges the
  strongest algorithm known wins (RFC 8760 §2.4). A challenge to an INVITE that already
  carried credentials fails the call (wrong password, or a trunk that challenges again),
  unless it says ``stale=true`` — then one more try with the new nonce (RFC 7616 §3.3). A
  challenge whose every algorithm is unknown fails at once: nothing is sent.
* **3xx** (RFC 3261 §8.1.3.4): the INVITE goes to the first Contact with the highest ``q``
  that was not tried yet, at most ``max_redirects`` times.
* anything else, or no credentials, or no reachable target: :class:`Failure` with the status
  and reason to report.

kefu never resolves a host name (as on the UAS side): a request goes to the outbound proxy
when one is configured, else to the Request-URI's host, which must then be an IP address.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from kefu.errors import SipParseError
from kefu.sip.auth import DigestAlgorithm, DigestChallenge, answer_challenge
from kefu.sip.dialog import new_branch
from kefu.sip.headers import NameAddr
from kefu.sip.message import Headers, Request, Response
from kefu.sip.transaction import ClientTransaction
from kefu.sip.ua_events import Peer
from kefu.sip.uri import SipUri, is_ip_address

__all__ = [
    "DialSpec",
    "Failure",
    "Outbound",
    "Retry",
    "after_final",
    "next_hop",
]

_STRENGTH = {
    DigestAlgorithm.SHA512_256: 3,
    DigestAlgorithm.SHA512_256_SESS: 3,
    DigestAlgorithm.SHA256: 2,
    DigestAlgorithm.SHA256_SESS: 2,
    DigestAlgorithm.MD5: 1,
    DigestAlgorithm.MD5_SESS: 1,
}


@dataclass(frozen=True, slots=True)
class DialSpec:
    """One outbound call as the application asks for it (RFC 3261 §8.1.1)."""

    target: str
    """The Request-URI and To URI: whom to call (``sip:+8610...@trunk``, §8.1.1.1)."""
    from_uri: str
    """The From header value without its tag, e.g. ``<sip:kefu@example.com>`` (§8.1.1.3)."""
    sdp: bytes
    """kefu's SDP offer (RFC 3264), the INVITE's body."""
    outbound_proxy: Peer | None = None
    """Where every request of the call goes (§8.1.2); None: the Request-URI's host."""
    username: str = ""
    """Digest user name for the trunk's challenges (§22.2); empty: a challenge fails."""
    password: str = ""
    """Digest password (§22.2)."""
    ring_timeout: float = 60.0
    """Seconds without a final response before kefu sends CANCEL (§9.1)."""
    max_redirects: int = 3
    """3xx responses followed at most (§8.1.3.4)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra headers for the INVITE."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Send ``invite`` (a new transaction) to ``peer``."""

    invite: Request
    peer: Peer
    cause: str
    """``auth`` (401/407 answered) or ``redirect`` (3xx followed)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """The call attempt is over: report ``status`` and ``reason``."""

    status: int
    reason: str


@dataclass(eq=False)
class Outbound:
    """The UAC side of one outbound leg (lives in :attr:`kefu.sip.ua_leg.Leg.outbound`)."""

    spec: DialSpec
    started: float
    """When the first INVITE was sent (set-up time is measured from it)."""
    ring_deadline: float
    """When kefu gives up waiting for an answer and cancels (§9.1)."""
    tx: ClientTransaction | None = None
    """The INVITE transaction now in progress."""
    provisional: bool = False
    """A 1xx arrived for the current INVITE: a CANCEL may be sent now (§9.1)."""
    credentials_sent: bool = False
    """The current INVITE carries credentials: a new non-stale challenge fails the call."""
    stale_retried: bool = False
    redirects: int = 0
    tried: set[str] = field(default_factory=set)
    """Targets already called (no redirect loops)."""
    nonce_counts: dict[str, int] = field(default_factory=dict)
    """Nonce -> the last ``nc`` sent with it (RFC 7616 §3.4)."""
    cancel_reason: str | None = None
    """Set when kefu decided to cancel (ring timeout, local hang-up): reported on the 487."""
    cancel_sent: bool = False
    give_up_at: float | None = None
    """64*T1 after the CANCEL: no final response by then ends the leg (§9.1)."""
    ack: Request | None = None
    """The ACK of the 2xx, sent again for every retransmission of the 2xx (§13.2.2.4)."""
    early_sdp: bytes | None = None
    """The SDP of a reliable-or-not 1xx (early media), kept until the 2xx."""


def next_hop(uri: SipUri, outbound_proxy: Peer | None) -> Peer | None:
    """Where a request for ``uri`` goes: the outbound proxy, or ``uri``'s host when it is
    an IP address (UDP, the URI's port or 5060); None when that needs DNS."""
    if outbound_proxy is not None:
        return outbound_proxy
    if not uri.is_sip or uri.scheme == "sips" or not is_ip_address(uri.host):
        return None
    if uri.transport not in (None, "udp"):
        return None
    return Peer("udp", uri.bare_host, uri.port or uri.default_port)


def _rebuilt(invite: Request, uri: SipUri, extra: tuple[tuple[str, str], ...]) -> Request:
    """The next INVITE of the same call: CSeq + 1, a new branch, new credentials (§8.1.3.5)."""
    via = invite.top_via  # ours: its branch is one token, replaced as text
    headers: list[tuple[str, str]] = []
    for name, value in invite.headers.items():
        lower = name.lower()
        if lower in ("authorization", "proxy-authorization"):
            continue
        if lower == "via":
            value = value.replace(f"branch={via.branch}", f"branch={new_branch()}")
        elif lower == "cseq":
            value = f"{invite.cseq.seq + 1} INVITE"
        headers.append((name, value))
    headers += list(extra)
    return Request("INVITE", uri, Headers(headers), invite.body)


def _challenges(resp: Response) -> tuple[str, list[str]]:
    if resp.status == 407:
        return "Proxy-Authorization", resp.headers.get_raw("Proxy-Authenticate")
    return "Authorization", resp.headers.get_raw("WWW-Authenticate")


def _pick_challenge(values: list[str]) -> tuple[str, DigestChallenge] | str:
    """The strongest Digest challenge we can answer, or why there is none."""
    best: tuple[int, str, DigestChallenge] | None = None
    unknown: list[str] = []
    for value in values:
        try:
            challenge = DigestChallenge.parse(value)
        except SipParseError as exc:
            unknown.append(str(exc))
            continue
        if challenge.qop and not {"auth", "auth-int"} & set(challenge.qop):
            unknown.append(f"no supported qop in {challenge.qop!r}")
            continue
        strength = _STRENGTH[challenge.algorithm]
        if best is None or strength > best[0]:
            best = (strength, value, challenge)
    if best is None:
        return "; ".join(unknown) or "no digest challenge"
    return best[1], best[2]


def _answer_auth(out: Outbound, invite: Request, resp: Response, peer: Peer) -> Retry | Failure:
    header, values = _challenges(resp)
    picked = _pick_challenge(values)
    if isinstance(picked, str):
        return Failure(resp.status, f"cannot answer the challenge: {picked}")
    value, challenge = picked
    if not out.spec.username:
        return Failure(resp.status, "challenged, and no trunk credentials are configured")
    if out.credentials_sent:
        if not challenge.stale or out.stale_retried:
            return Failure(resp.status, "authentication failed: challenged again")
        out.stale_retried = True
    nc = out.nonce_counts.get(challenge.nonce, 0) + 1
    out.nonce_counts[challenge.nonce] = nc
    credentials = answer_challenge(
        value,
        "INVITE",
        str(invite.uri),
        out.spec.username,
        out.spec.password,
        secrets.token_hex(8),
        nc,
        body=invite.body,
    )
    out.credentials_sent = True
    return Retry(_rebuilt(invite, invite.uri, ((header, credentials),)), peer, "auth")


def _redirect(out: Outbound, invite: Request, resp: Response) -> Retry | Failure:
    if out.redirects >= out.spec.max_redirects:
        return Failure(resp.status, f"more than {out.spec.max_redirects} redirects")
    candidates: list[tuple[float, int, SipUri]] = []
    for index, value in enumerate(resp.headers.get_all("Contact")):
        try:
            contact = NameAddr.parse(value)
        except SipParseError:
            continue
        uri = contact.uri.without_headers()
        q_text = next((v for k, v in contact.params if k.lower() == "q"), None)
        try:
            q = float(q_text) if q_text else 1.0
        except ValueError:
            q = 0.0
        if str(uri) not in out.tried:
            candidates.append((-q, index, uri))
    for _, _, uri in sorted(candidates, key=lambda c: (c[0], c[1])):
        peer = next_hop(uri, out.spec.outbound_proxy)
        if peer is None:
            continue
        out.redirects += 1
        out.tried.add(str(uri))
        out.credentials_sent = out.stale_retried = False
        return Retry(_rebuilt(invite, uri, ()), peer, "redirect")
    return Failure(resp.status, "redirected to no target kefu can reach")


def after_final(out: Outbound, invite: Request, resp: Response, peer: Peer) -> Retry | Failure:
    """What a 3xx-6xx final response to ``invite`` (sent to ``peer``) leads to."""
    if out.cancel_reason is not None:
        return Failure(resp.status, out.cancel_reason)
    if resp.status in (401, 407):
        return _answer_auth(out, invite, resp, peer)
    if 300 <= resp.status < 400:
        return _redirect(out, invite, resp)
    return Failure(resp.status, resp.reason or "failed")

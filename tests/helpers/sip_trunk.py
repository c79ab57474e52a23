"""Builders for the user-agent tests: a fake trunk that writes requests as a VCC would."""

from __future__ import annotations

from kefu.sip.message import Request, Response, parse_message
from kefu.sip.ua import Peer, UserAgent

TRUNK = Peer("udp", "127.0.0.1", 5080)

SDP_OFFER = (
    "v=0\r\no=vcc 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 6000 RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\n"
    "a=fmtp:101 0-16\r\na=ptime:20\r\n"
)


def request(
    method: str,
    *,
    call_id: str = "call-1@vcc",
    cseq: int = 1,
    branch: str = "z9hG4bK-1",
    from_tag: str = "vcc-tag",
    to_tag: str | None = None,
    user: str = "4001",
    body: str = "",
    content_type: str | None = None,
    extra: tuple[tuple[str, str], ...] = (),
    via_host: str = "127.0.0.1:5080",
) -> bytes:
    to = f"<sip:{user}@127.0.0.1:5070>" + (f";tag={to_tag}" if to_tag else "")
    lines = [
        f"{method} sip:{user}@127.0.0.1:5070 SIP/2.0",
        f"Via: SIP/2.0/UDP {via_host};branch={branch};rport",
        "Max-Forwards: 70",
        f"From: <sip:caller@127.0.0.1>;tag={from_tag}",
        f"To: {to}",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} {method}",
        "Contact: <sip:caller@127.0.0.1:5080>",
    ]
    lines += [f"{k}: {v}" for k, v in extra]
    if body:
        lines.append(f"Content-Type: {content_type or 'application/sdp'}")
    lines.append(f"Content-Length: {len(body.encode())}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


def invite(**kw: object) -> bytes:
    kw.setdefault("body", SDP_OFFER)
    return request("INVITE", **kw)  # type: ignore[arg-type]


def sent(ua: UserAgent) -> list[tuple[Request | Response, Peer]]:
    return [(parse_message(data), peer) for data, peer in ua.datagrams_to_send()]


def responses(ua: UserAgent) -> list[Response]:
    return [m for m, _ in sent(ua) if isinstance(m, Response)]


def events(ua: UserAgent) -> list[object]:
    out = []
    while (e := ua.next_event()) is not None:
        out.append(e)
    return out


def app_events(ua: UserAgent) -> list[object]:
    """Events minus the metrics-only ones."""
    from kefu.sip import ua_events as ev

    return [
        e for e in events(ua) if not isinstance(e, ev.RequestSeen | ev.ResponseSent | ev.Dropped)
    ]

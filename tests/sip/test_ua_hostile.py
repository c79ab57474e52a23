"""Hostile header values through the UA's public path: receive() -> datagrams_to_send().

Every datagram gets at most one response, the response is one kefu's own parser reads back,
no octet of a peer's header can split a line of it, and the UA keeps serving afterwards.
"""

from __future__ import annotations

import re

import pytest
from helpers.sip_trunk import TRUNK, events, invite, request

from kefu.sip import ua_events as ev
from kefu.sip.message import Response, parse_message
from kefu.sip.ua import UserAgent

_BARE_CR = re.compile(rb"\r(?!\n)")


@pytest.fixture
def ua() -> UserAgent:
    agent = UserAgent()
    agent.set_local_address("127.0.0.1", 5070)
    return agent


def answer_of(ua: UserAgent, data: bytes) -> Response | None:
    """Feed one datagram; the one response it got (None if dropped), checked on the wire."""
    ua.receive(data, TRUNK, 0.0)
    out = ua.datagrams_to_send()
    assert len(out) <= 1, out
    seen = events(ua)
    assert sum(isinstance(e, ev.Dropped) for e in seen) <= 1, seen
    if not out:
        return None
    wire, peer = out[0]
    assert peer == TRUNK
    assert not _BARE_CR.search(wire), wire
    assert b"\n" not in wire.replace(b"\r\n", b""), wire
    resp = parse_message(wire)
    assert isinstance(resp, Response)
    return resp


def still_serving(ua: UserAgent) -> None:
    ua.receive(request("OPTIONS", call_id="after", branch="z9hG4bK-after"), TRUNK, 1.0)
    out = [parse_message(d) for d, _ in ua.datagrams_to_send()]
    assert [m.status for m in out if isinstance(m, Response)] == [200]


@pytest.mark.parametrize("method", ["OPTIONS", "INVITE"])
def test_require_with_bare_cr_is_400_not_a_crash(ua: UserAgent, method: str) -> None:
    build = invite if method == "INVITE" else (lambda **kw: request("OPTIONS", **kw))
    resp = answer_of(ua, build(extra=(("Require", "foo\rbar"),)))
    assert resp is not None
    assert (resp.status, resp.reason) == (400, "Bad Require header")
    assert "Unsupported" not in resp.headers
    assert resp.call_id == "call-1@vcc" and resp.cseq.method == method
    still_serving(ua)


@pytest.mark.parametrize("value", ["foo bar", "foo\x00", "<x>", '"q"', "a;b", "f\x7fo", "é"])
def test_require_tokens_that_are_not_tokens_are_400(ua: UserAgent, value: str) -> None:
    resp = answer_of(ua, request("OPTIONS", extra=(("Require", value),)))
    assert resp is not None
    assert (resp.status, resp.reason) == (400, "Bad Require header")
    assert "Unsupported" not in resp.headers


def test_unknown_option_tag_is_still_420_listing_it(ua: UserAgent) -> None:
    resp = answer_of(ua, request("OPTIONS", extra=(("Require", "100rel, timer, foo.bar"),)))
    assert resp is not None and resp.status == 420
    assert resp.headers.get_all("Unsupported") == ["100rel", "foo.bar"]


ECHOED = [
    ("Via", "SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bK-1;rport\rX-Injected: 1"),
    ("From", "<sip:caller@127.0.0.1>;tag=vcc-tag\rX-Injected: 1"),
    ("To", "<sip:4001@127.0.0.1:5070>\rX-Injected: 1"),
    ("Call-ID", "call-1@vcc\rX-Injected: 1"),
    ("CSeq", "1 OPTIONS\rX-Injected: 1"),
]


@pytest.mark.parametrize(("name", "value"), ECHOED, ids=[n for n, _ in ECHOED])
def test_bare_cr_in_a_copied_header_never_reaches_the_wire(
    ua: UserAgent, name: str, value: str
) -> None:
    data = request("OPTIONS")
    data = re.sub(rf"(?m)^{name}: .*\r$".encode(), f"{name}: {value}\r".encode(), data)
    assert value.encode() in data
    resp = answer_of(ua, data)
    # The copied header itself is unusable: kefu cannot address a 400, so it drops the request.
    assert resp is None
    still_serving(ua)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Record-Route", "<sip:p.example;lr>\rX-Injected: 1"),
        ("Timestamp", "54\rX-Injected: 1"),
        ("Supported", "timer\rX"),
        ("Session-Expires", "1800\r;refresher=uac"),
        ("Allow", "INVITE\rACK"),
        ("Authorization", 'Digest username="a\rb"'),
        ("X-Anything", "a\rb"),
    ],
)
def test_bare_cr_in_any_other_header_is_400_naming_it(ua: UserAgent, name: str, value: str) -> None:
    resp = answer_of(ua, invite(extra=((name, value),)))
    assert resp is not None
    assert (resp.status, resp.reason) == (400, f"Bad {name} header")
    assert ua.leg_count == 0
    still_serving(ua)


def test_bare_cr_in_a_folded_line_is_400(ua: UserAgent) -> None:
    data = request("OPTIONS", extra=(("Subject", "hello"),))
    data = data.replace(b"Subject: hello\r\n", b"Subject: hello\r\n  world\rX: 1\r\n")
    resp = answer_of(ua, data)
    assert resp is not None and (resp.status, resp.reason) == (400, "Bad Subject header")


@pytest.mark.parametrize(
    "raw",
    [b"\x00", b"\xff\xfe", b"\xc3\x28", b"\x7f", b"\xed\xa0\x80"],
    ids=["nul", "not-utf8", "bad-utf8", "del", "surrogate"],
)
def test_odd_octets_in_echoed_headers_round_trip(ua: UserAgent, raw: bytes) -> None:
    data = request("OPTIONS", call_id="x@vcc", from_tag="t")
    data = data.replace(b"x@vcc", b"x" + raw + b"@vcc").replace(b"tag=t", b"tag=t" + raw)
    data = data.replace(b"branch=z9hG4bK-1", b"branch=z9hG4bK-1" + raw)
    resp = answer_of(ua, data)
    if resp is not None:  # answered or dropped, never a crash; what is echoed is verbatim
        assert resp.headers.get("Call-ID") == (
            "x" + raw.decode("utf-8", "surrogateescape") + "@vcc"
        )
    still_serving(ua)


def test_timestamp_and_record_route_echo_stay_verbatim(ua: UserAgent) -> None:
    ua.receive(
        invite(extra=(("Record-Route", "<sip:p1.example;lr>"), ("Timestamp", "54 0.5"))),
        TRUNK,
        0.0,
    )
    (call,) = [e for e in events(ua) if isinstance(e, ev.IncomingCall)]
    ua.ring(call.leg, 0.0)
    ((wire, _),) = ua.datagrams_to_send()
    ringing = parse_message(wire)
    assert isinstance(ringing, Response) and ringing.status == 180
    assert ringing.headers.get_all("Record-Route") == ["<sip:p1.example;lr>"]

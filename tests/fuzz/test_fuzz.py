"""Fuzz targets for everything kefu parses from the network, kept small enough for CI.

Targets: the SIP message parser (and the header views and checks a UAS runs on it), SDP
(parse, serialize, answer), RTP and RTCP packets, digest authentication headers, and the
whole user-agent request path (bytes -> ``UserAgent.receive`` -> ``datagrams_to_send``),
out of dialog, inside an answered call, and as responses to a REFER kefu sent. Each target
states which exceptions it may raise (the documented ``parse()`` errors; none at all for the
UA) and checks what it produced: every packet re-parses to the same thing, every response
the UA sends is one kefu's own parser reads back.

Inputs: the committed seed corpus under ``tests/fuzz/corpus/<target>/`` is replayed first,
one test per file; hypothesis then mutates those seeds (hostile snippets, octet flips, line
duplication and removal, splices, see ``mutations.py``) or draws raw bytes.

Bounded for CI: by default each target runs a fixed, derandomized number of examples with
no deadline (about 16 s for all targets, corpus replay included, on a 2-core box; no
wall-clock assertion anywhere). Fuzz longer, with fresh random inputs, by setting the
example count per target::

    KEFU_FUZZ_EXAMPLES=200000 .venv/bin/python -m pytest -p no:cacheprovider tests/fuzz -x

A crash found that way: add its input as ``corpus/<target>/crash-<what>.bin`` and fix it
at its source. ``make_corpus.py`` rebuilds the ``seed-*`` files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fuzz.mutations import CORPUS, load_corpus, mutate
from helpers.sip_trunk import TRUNK, invite, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kefu.errors import RtpError, SdpError, SipParseError
from kefu.rtp.packet import RtpPacket
from kefu.rtp.rtcp import parse_compound, serialize_compound
from kefu.sip import ua_events as ev
from kefu.sip.auth import DigestChallenge, DigestCredentials, DigestServer, parse_auth_params
from kefu.sip.message import Request, Response, parse_message
from kefu.sip.offer_answer import answer_offer
from kefu.sip.sdp import parse_sdp
from kefu.sip.ua import UaSettings, UserAgent
from kefu.sip.validate import check_request, check_response, response_for_parse_error

LONG_RUN = int(os.environ.get("KEFU_FUZZ_EXAMPLES", "0"))
# A long run outlasts the suite's per-test timeout (pyproject's pytest-timeout setting).
pytestmark = [pytest.mark.timeout(0)] if LONG_RUN else []


def fuzz_settings(examples: int) -> settings:
    """``examples`` in CI (reproducible), KEFU_FUZZ_EXAMPLES random ones when set."""
    return settings(
        max_examples=LONG_RUN or examples,
        deadline=None,
        database=None,
        derandomize=not LONG_RUN,
        suppress_health_check=list(HealthCheck),
    )


def inputs(target: str, *, raw_bytes: int = 1024) -> st.SearchStrategy[bytes]:
    """Corpus seeds with 0-4 mutations drawn by hypothesis, or (1 in 8) raw bytes."""
    seeds = load_corpus(target)

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        if draw(st.integers(0, 7)) == 0:
            return draw(st.binary(max_size=raw_bytes))
        data = draw(st.sampled_from(seeds))

        def pick(n: int) -> int:
            return draw(st.integers(0, max(n - 1, 0)))

        for _ in range(draw(st.integers(0, 4))):
            data = mutate(data, pick, seeds)
        return data

    return build()


def corpus_files(target: str) -> list[Path]:
    return sorted(p for p in (CORPUS / target).iterdir() if p.is_file())


def replay(target: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    return pytest.mark.parametrize("path", corpus_files(target), ids=lambda p: p.stem)


# --- SIP message parser ---------------------------------------------------------------------


def check_sip_message(data: bytes) -> None:
    try:
        msg = parse_message(data)
    except SipParseError as exc:
        resp = response_for_parse_error(data, exc, to_tag="fuzz")
        if resp is not None:
            assert isinstance(parse_message(bytes(resp)), Response)
        return
    again = parse_message(bytes(msg))
    assert type(again) is type(msg)
    assert again.headers.remove("Content-Length") == msg.headers.remove("Content-Length")
    assert again.body == msg.body
    if isinstance(msg, Request):
        assert isinstance(again, Request)
        assert (again.method, str(again.uri)) == (msg.method, str(msg.uri))
        check_request(msg)
    else:
        check_response(msg)
    for view in ("call_id", "cseq", "from_", "to", "vias", "contacts", "max_forwards"):
        try:
            getattr(msg, view)
        except SipParseError:
            pass


@replay("sip_message")
def test_sip_message_corpus(path: Path) -> None:
    check_sip_message(path.read_bytes())


@fuzz_settings(2000)
@given(inputs("sip_message"))
def test_sip_message_fuzz(data: bytes) -> None:
    check_sip_message(data)


# --- SDP ------------------------------------------------------------------------------------


def check_sdp(data: bytes) -> None:
    try:
        sdp = parse_sdp(data)
    except SdpError:
        return
    wire = sdp.serialize()
    assert parse_sdp(wire).serialize() == wire
    try:
        answer = answer_offer(
            sdp, local_address="192.0.2.1", local_port=4000, session_id=1, session_version=1
        )
    except SdpError:
        return
    assert parse_sdp(answer.answer.serialize()).serialize() == answer.answer.serialize()


@replay("sdp")
def test_sdp_corpus(path: Path) -> None:
    check_sdp(path.read_bytes())


@fuzz_settings(1500)
@given(inputs("sdp"))
def test_sdp_fuzz(data: bytes) -> None:
    check_sdp(data)


# --- RTP and RTCP ---------------------------------------------------------------------------


def check_rtp(data: bytes) -> None:
    try:
        packet = RtpPacket.parse(data)
    except RtpError:
        return
    assert RtpPacket.parse(bytes(packet)) == packet


def check_rtcp(data: bytes) -> None:
    try:
        packets = parse_compound(data)
    except RtpError:
        return
    assert parse_compound(serialize_compound(packets)) == packets


@replay("rtp")
def test_rtp_corpus(path: Path) -> None:
    check_rtp(path.read_bytes())


@replay("rtcp")
def test_rtcp_corpus(path: Path) -> None:
    check_rtcp(path.read_bytes())


@fuzz_settings(3000)
@given(inputs("rtp", raw_bytes=256))
def test_rtp_fuzz(data: bytes) -> None:
    check_rtp(data)


@fuzz_settings(3000)
@given(inputs("rtcp", raw_bytes=256))
def test_rtcp_fuzz(data: bytes) -> None:
    check_rtcp(data)


# --- digest authentication headers ----------------------------------------------------------

_SERVER = DigestServer("kefu", {"vcc": "s3cret"}, b"k" * 32, opaque="op")


def check_digest(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    try:
        parse_auth_params(text)
    except SipParseError:
        pass
    try:
        creds = DigestCredentials.parse(text)
        # Unknown directives are kept for logs only, never written back.
        assert DigestCredentials.parse(str(creds)) == replace(creds, extra=())
    except SipParseError:
        pass
    try:
        challenge = DigestChallenge.parse(text)
        assert DigestChallenge.parse(str(challenge)) == challenge
    except SipParseError:
        pass
    result = _SERVER.verify("INVITE", text, 1.0, request_uri="sip:4001@kefu")
    assert not result.ok  # no fuzzer guesses a digest response


@replay("digest")
def test_digest_corpus(path: Path) -> None:
    check_digest(path.read_bytes())


@fuzz_settings(2000)
@given(inputs("digest", raw_bytes=256))
def test_digest_fuzz(data: bytes) -> None:
    check_digest(data)


# --- the whole UA request path --------------------------------------------------------------


def sent_ok(ua: UserAgent) -> list[Request | Response]:
    """Everything the UA sends: to the packet source only, and readable by our parser."""
    out = []
    for wire, peer in ua.datagrams_to_send():
        assert peer == TRUNK
        assert b"\n" not in wire.split(b"\r\n\r\n", 1)[0].replace(b"\r\n", b""), wire
        out.append(parse_message(wire))
    return out


def drain(ua: UserAgent) -> list[ev.UaEvent]:
    seen = []
    while (e := ua.next_event()) is not None:
        seen.append(e)
    return seen


def check_ua(data: bytes, *, auth: bool) -> None:
    settings_ = UaSettings(auth_users=(("vcc", "s3cret"),), auth_secret=b"k" * 32) if auth else None
    ua = UserAgent(settings_)
    ua.set_local_address("127.0.0.1", 5070)
    ua.receive(data, TRUNK, 0.0)
    assert len([m for m in sent_ok(ua) if isinstance(m, Response)]) <= 1
    for event in drain(ua):
        if isinstance(event, ev.IncomingCall):
            ua.answer(event.leg, b"v=0\r\n", 0.1)
    sent_ok(ua)
    ua.handle_timer(40.0)
    sent_ok(ua)
    drain(ua)


@replay("ua")
def test_ua_corpus(path: Path) -> None:
    check_ua(path.read_bytes(), auth=False)
    check_ua(path.read_bytes(), auth=True)


@fuzz_settings(2000)
@given(inputs("ua", raw_bytes=512), st.booleans())
def test_ua_fuzz(data: bytes, auth: bool) -> None:
    check_ua(data, auth=auth)


IN_DIALOG = ("BYE", "INFO", "INVITE", "UPDATE", "NOTIFY", "REFER", "OPTIONS", "ACK", "CANCEL")


@fuzz_settings(1000)
@given(st.sampled_from(IN_DIALOG), st.data())
def test_ua_in_dialog_fuzz(method: str, data: st.DataObject) -> None:
    """A mutated request inside an answered call (tags right, so dialog code runs)."""
    ua = UserAgent()
    ua.set_local_address("127.0.0.1", 5070)
    ua.receive(invite(extra=(("Record-Route", "<sip:p1.example;lr>"),)), TRUNK, 0.0)
    (call,) = [e for e in drain(ua) if isinstance(e, ev.IncomingCall)]
    ua.answer(call.leg, b"v=0\r\n", 0.0)
    (ok,) = sent_ok(ua)
    tag = ok.to.tag or ""
    if method != "CANCEL":
        ua.receive(request("ACK", to_tag=tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    base = request(method, to_tag=tag, cseq=2, branch="z9hG4bK-in", body="Signal=1\r\n")
    seeds = (base,)

    def pick(n: int) -> int:
        return data.draw(st.integers(0, max(n - 1, 0)))

    for _ in range(data.draw(st.integers(1, 4))):
        base = mutate(base, pick, seeds)
    ua.receive(base, TRUNK, 1.0)
    sent_ok(ua)
    drain(ua)
    ua.handle_timer(100.0)
    sent_ok(ua)
    drain(ua)


@fuzz_settings(800)
@given(st.data())
def test_ua_response_to_our_refer_fuzz(data: st.DataObject) -> None:
    """A mutated response to the REFER kefu sent (it matches our client transaction)."""
    ua = UserAgent()
    ua.set_local_address("127.0.0.1", 5070)
    ua.receive(invite(), TRUNK, 0.0)
    (call,) = [e for e in drain(ua) if isinstance(e, ev.IncomingCall)]
    ua.answer(call.leg, b"v=0\r\n", 0.0)
    (ok,) = sent_ok(ua)
    ua.receive(request("ACK", to_tag=ok.to.tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    ua.refer(call.leg, "sip:queue@127.0.0.1:5090", 1.0)
    (refer,) = sent_ok(ua)
    assert isinstance(refer, Request)
    status = data.draw(st.sampled_from((100, 202, 403, 481, 500, 603)))
    base = (
        f"SIP/2.0 {status} X\r\nVia: {refer.headers.get('Via')}\r\n"
        f"From: {refer.headers.get('From')}\r\nTo: {refer.headers.get('To')}\r\n"
        f"Call-ID: {refer.call_id}\r\nCSeq: {refer.cseq}\r\nContent-Length: 0\r\n\r\n"
    ).encode()

    def pick(n: int) -> int:
        return data.draw(st.integers(0, max(n - 1, 0)))

    for _ in range(data.draw(st.integers(0, 4))):
        base = mutate(base, pick, (base,))
    ua.receive(base, TRUNK, 1.1)
    sent_ok(ua)
    drain(ua)
    ua.handle_timer(100.0)
    sent_ok(ua)
    drain(ua)

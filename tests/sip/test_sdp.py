"""SDP parse/serialize: golden round trips, helpers, torture bodies and hostile input."""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path

import pytest

from kefu.errors import RemoteError, SdpError
from kefu.sip.sdp import MAX_SDP_BYTES, SessionDescription, parse_sdp
from kefu.sip.sdp_fields import (
    STATIC_PAYLOAD_TYPES,
    Connection,
    MediaDescription,
    Origin,
    RtpMap,
)

GOLDEN = Path(__file__).parent / "golden" / "sdp"
GOLDEN_FILES = sorted(GOLDEN.glob("*.sdp")) + sorted((GOLDEN / "answers").glob("*.sdp"))
TESTDATA = Path(os.environ.get("KEFU_TESTDATA", "/work/shared/testdata"))

HEAD = "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n"


def sdp(*lines: str, head: str = HEAD) -> bytes:
    return (head + "".join(line + "\r\n" for line in lines)).encode()


def body_of(message: bytes) -> bytes:
    """The body of a SIP message file: everything after the first blank line."""
    crlf, lf = message.find(b"\r\n\r\n"), message.find(b"\n\n")
    if crlf != -1 and (lf == -1 or crlf < lf):
        return message[crlf + 4 :]
    return message[lf + 2 :]


# --- golden round trips --------------------------------------------------------------------


def test_golden_files_exist() -> None:
    names = {p.name for p in GOLDEN_FILES}
    for expected in (
        "vcc_g711_offer.sdp",
        "webrtc_opus_offer.sdp",
        "vcc_hold_sendonly_offer.sdp",
        "ipv6_offer.sdp",
        "audio_video_offer.sdp",
        "hold_0000_offer.sdp",
    ):
        assert expected in names


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.name)
def test_golden_round_trip_is_byte_exact(path: Path) -> None:
    data = path.read_bytes()
    assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    parsed = SessionDescription.parse(data)
    assert parsed.serialize() == data
    assert bytes(parsed) == data
    assert SessionDescription.parse(parsed.serialize()) == parsed


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.name)
def test_lf_only_input_parses_the_same(path: Path) -> None:
    data = path.read_bytes()
    assert parse_sdp(data.replace(b"\r\n", b"\n")) == parse_sdp(data)
    assert parse_sdp(data.decode()) == parse_sdp(data)


def test_sloppy_input_is_normalised() -> None:
    sloppy = (
        b"v=0\n"
        b"o=-   7  9 IN  IP4 192.0.2.9\n"
        b"c=IN IP4 192.0.2.9\n"
        b"m=audio  4000   RTP/AVP 0   8\n"
        b"\n"
        b"a=sendrecv\n\n\n"
    )
    expected = (
        b"v=0\r\no=- 7 9 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\n"
        b"m=audio 4000 RTP/AVP 0 8\r\na=sendrecv\r\n"
    )
    assert parse_sdp(sloppy).serialize() == expected


def test_vcc_offer_model() -> None:
    offer = parse_sdp((GOLDEN / "vcc_g711_offer.sdp").read_bytes())
    assert offer.origin == Origin("VCC", 1700000000, 1700000001, "IN", "IP4", "10.20.30.40")
    assert offer.session_name == "SBC call"
    assert offer.connection == Connection("10.20.30.40")
    assert (offer.timing.start, offer.timing.stop) == (0, 0)
    (audio,) = offer.media
    assert (audio.media, audio.port, audio.port_count, audio.proto) == (
        "audio",
        31000,
        1,
        "RTP/AVP",
    )
    assert audio.formats == ("8", "0", "18", "101")
    assert audio.payload_types == (8, 0, 18, 101)
    assert audio.rtpmaps() == {
        8: RtpMap("PCMA", 8000),
        0: RtpMap("PCMU", 8000),
        18: RtpMap("G729", 8000),
        101: RtpMap("telephone-event", 8000),
    }
    assert audio.fmtp(18) == "annexb=no"
    assert audio.fmtp(101) == "0-15"
    assert audio.fmtp(8) is None
    assert (audio.ptime(), audio.maxptime()) == (20, 40)
    assert audio.direction(offer) == "sendrecv"
    assert audio.rtcp_port() is None
    assert audio.attributes[0] == ("rtpmap", "8 PCMA/8000")
    assert audio.attributes[-1] == ("sendrecv", None)


def test_webrtc_offer_model() -> None:
    offer = parse_sdp((GOLDEN / "webrtc_opus_offer.sdp").read_bytes())
    assert offer.connection is None
    assert offer.attribute("group") == "BUNDLE 0 1 2"
    assert offer.attribute("msid-semantic") == " WMS kefu-stream"
    assert offer.has_attribute("extmap-allow-mixed")
    audio, video, data = offer.media
    assert audio.proto == "UDP/TLS/RTP/SAVPF"
    assert audio.rtpmaps()[111] == RtpMap("opus", 48000, 2)
    assert audio.rtpmaps()[63] == RtpMap("red", 48000, 2)
    assert audio.fmtp(111) == "minptime=10;useinbandfec=1"
    assert audio.rtcp_port() == 9
    assert audio.has_attribute("rtcp-mux")
    # c=0.0.0.0 is only an ICE placeholder here, not an RFC 2543 hold.
    assert audio.direction(offer) == "sendrecv"
    assert video.direction(offer) == "recvonly"
    assert data.formats == ("webrtc-datachannel",)
    assert not data.is_rtp and data.payload_types == ()
    assert data.rtpmaps() == {}


def test_audio_video_offer_model() -> None:
    offer = parse_sdp((GOLDEN / "audio_video_offer.sdp").read_bytes())
    assert offer.origin.address == "host.atlanta.example.com"
    assert offer.bandwidths[0].type == "CT" and offer.bandwidths[0].value == 384
    assert offer.timing.repeats == ("604800 3600 0 90000",)
    assert ("z", "2882844526 -1h 2898848070 0") in offer.extra
    video, srtp, main, second, fax = offer.media
    assert video.rtpmaps() == {31: RtpMap("H261", 90000), 34: RtpMap("H263", 90000)}
    assert video.bandwidths[0].value == 256
    assert srtp.port_count == 2 and srtp.proto == "RTP/SAVP"
    assert main.extra == (("i", "main audio"),)
    assert main.effective_connection(offer) == Connection("192.0.2.102")
    assert main.direction(offer) == "recvonly"
    assert second.rtpmaps() == {0: RtpMap("PCMU", 8000)}
    assert fax.proto == "udptl" and fax.formats == ("t38",)


# --- helpers -------------------------------------------------------------------------------


def test_static_payload_types_follow_rfc3551() -> None:
    assert STATIC_PAYLOAD_TYPES[0] == RtpMap("PCMU", 8000)
    assert STATIC_PAYLOAD_TYPES[8] == RtpMap("PCMA", 8000)
    assert STATIC_PAYLOAD_TYPES[9] == RtpMap("G722", 8000)
    assert STATIC_PAYLOAD_TYPES[18] == RtpMap("G729", 8000)
    assert STATIC_PAYLOAD_TYPES[10] == RtpMap("L16", 44100, 2)
    with pytest.raises(TypeError):
        STATIC_PAYLOAD_TYPES[96] = RtpMap("x", 1)  # type: ignore[index]


def test_rtpmaps_explicit_wins_and_bad_ones_are_skipped() -> None:
    body = sdp(
        "m=audio 4000 RTP/AVP 0 96 97 98 99",
        "a=rtpmap:0 pcmu/8000",
        "a=rtpmap:96 opus/48000/2",
        "a=rtpmap:97 LPC",
        "a=rtpmap:98 L16/0",
        "a=rtpmap:100 speex/16000",
        "a=rtpmap:96 second/8000",
    )
    (audio,) = parse_sdp(body).media
    assert audio.rtpmaps() == {0: RtpMap("pcmu", 8000), 96: RtpMap("opus", 48000, 2)}
    assert str(RtpMap("opus", 48000, 2)) == "opus/48000/2"
    assert str(RtpMap("PCMU", 8000)) == "PCMU/8000"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("20", 20), ("30", 30), ("20.0", 20), ("abc", None), ("0", None), ("-20", None)],
)
def test_ptime_parsing(value: str, expected: int | None) -> None:
    (audio,) = parse_sdp(sdp("m=audio 4000 RTP/AVP 0", f"a=ptime:{value}")).media
    assert audio.ptime() == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("4001", 4001), ("53020 IN IP4 126.16.64.4", 53020), ("99999", None), ("x", None)],
)
def test_rtcp_port(value: str, expected: int | None) -> None:
    (audio,) = parse_sdp(sdp("m=audio 4000 RTP/AVP 0", f"a=rtcp:{value}")).media
    assert audio.rtcp_port() == expected


@pytest.mark.parametrize(
    ("session_attr", "media_attr", "address", "expected"),
    [
        (None, None, "192.0.2.1", "sendrecv"),
        ("sendonly", None, "192.0.2.1", "sendonly"),
        ("sendonly", "recvonly", "192.0.2.1", "recvonly"),
        (None, "inactive", "192.0.2.1", "inactive"),
        (None, None, "0.0.0.0", "sendonly"),
        (None, "recvonly", "0.0.0.0", "inactive"),
        (None, "sendonly", "0.0.0.0", "sendonly"),
        ("inactive", None, "0.0.0.0", "inactive"),
    ],
)
def test_direction(
    session_attr: str | None, media_attr: str | None, address: str, expected: str
) -> None:
    head = f"v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 {address}\r\nt=0 0\r\n"
    lines = [f"a={session_attr}"] if session_attr else []
    lines.append("m=audio 4000 RTP/AVP 0")
    if media_attr:
        lines.append(f"a={media_attr}")
    offer = parse_sdp(sdp(*lines, head=head))
    assert offer.media[0].direction(offer) == expected


def test_media_connection_overrides_session_for_hold() -> None:
    offer = parse_sdp(sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 0.0.0.0"))
    assert offer.media[0].direction(offer) == "sendonly"
    assert offer.media[0].direction() == "sendonly"


def test_build_and_serialize_programmatically() -> None:
    desc = SessionDescription(
        origin=Origin("kefu", 5, 6, address="192.0.2.7"),
        connection=Connection("192.0.2.7"),
        attributes=(("tool", "kefu"),),
        media=(
            MediaDescription("audio", 4000, "RTP/AVP", ("0",), attributes=(("sendrecv", None),)),
        ),
    )
    text = (
        "v=0\r\no=kefu 5 6 IN IP4 192.0.2.7\r\ns=-\r\nc=IN IP4 192.0.2.7\r\nt=0 0\r\n"
        "a=tool:kefu\r\nm=audio 4000 RTP/AVP 0\r\na=sendrecv\r\n"
    )
    assert str(desc) == text
    assert parse_sdp(text) == desc


def test_multicast_connection_round_trips() -> None:
    body = sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 224.2.1.1/127/3", "c=IN IP6 ff15::101/3")
    with pytest.raises(SdpError, match="duplicate c="):
        parse_sdp(body)
    one = sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 224.2.1.1/127/3")
    parsed = parse_sdp(one)
    assert parsed.media[0].connection == Connection("224.2.1.1", multicast="/127/3")
    assert parsed.serialize() == one


# --- RFC 4475 / RFC 5118 bodies ------------------------------------------------------------


def _testdata(area: str) -> list[Path]:
    folder = TESTDATA / area
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if b"\nv=0" in p.read_bytes())


@pytest.mark.parametrize("path", _testdata("rfc5118"), ids=lambda p: p.name)
def test_rfc5118_sdp_bodies(path: Path) -> None:
    offer = parse_sdp(body_of(path.read_bytes()))
    assert len(offer.media) == 2
    audio, video = offer.media
    assert audio.media == "audio" and video.media == "video"
    conn = audio.effective_connection(offer)
    assert conn is not None
    if path.name == "mult-ip-in-sdp":
        assert conn == Connection("192.0.2.1")
        assert video.effective_connection(offer) == Connection("2001:db8::1", "IP6")
        assert offer.session_name == ""
    else:
        assert conn.addr_type == "IP6"
        assert audio.rtpmaps() == {2: RtpMap("G726-32", 8000)}
    assert parse_sdp(offer.serialize()) == offer


def test_rfc5118_files_present() -> None:
    if not (TESTDATA / "rfc5118").is_dir():
        pytest.skip("RFC 5118 test data not available")
    assert {p.name for p in _testdata("rfc5118")} >= {"ipv6-in-sdp", "mult-ip-in-sdp"}


@pytest.mark.parametrize("path", _testdata("rfc4475"), ids=lambda p: p.name)
def test_rfc4475_sdp_bodies(path: Path) -> None:
    body = body_of(path.read_bytes())
    if path.name in ("test.dat", "dblreq.dat"):
        # test.dat has "testing=123"; dblreq's second request (to be ignored) has "m =video".
        with pytest.raises(SdpError, match="expected '<letter>=<value>'"):
            parse_sdp(body if path.name == "test.dat" else body_of(body)[:150])
        return
    offer = parse_sdp(body)
    assert offer.media[0].media == "audio"
    assert offer.media[0].rtpmaps()[0] == RtpMap("PCMU", 8000)


# --- malformed and hostile input -----------------------------------------------------------

MALFORMED = {
    "empty": (b"", "missing v="),
    "blank": (b"\r\n\r\n", "missing v="),
    "no v": (b"o=- 1 1 IN IP4 192.0.2.1\r\n", "line 1: first line must be v="),
    "v=1": (b"v=1\r\no=- 1 1 IN IP4 192.0.2.1\r\n", "line 1: unsupported SDP version"),
    "no o": (b"v=0\r\ns=-\r\nt=0 0\r\n", "no o= line"),
    "two v": (sdp("v=0"), "line 6: duplicate v="),
    "two o": (sdp("o=- 1 1 IN IP4 192.0.2.1"), "line 6: duplicate o="),
    "o 5 fields": (b"v=0\r\no=- 1 1 IN IP4\r\n", "line 2: o= needs 6 fields"),
    "o id": (b"v=0\r\no=- abc 1 IN IP4 192.0.2.1\r\n", "line 2: o= session id"),
    "o negative": (b"v=0\r\no=- -1 1 IN IP4 192.0.2.1\r\n", "line 2: o= session id"),
    "garbage": (sdp("hello world"), "line 6: expected '<letter>=<value>'"),
    "upper type": (sdp("M=audio 4000 RTP/AVP 0"), "line 6: expected '<letter>=<value>'"),
    "unknown type": (sdp("x=1"), "line 6: unknown or misplaced line type 'x'"),
    "s in media": (sdp("m=audio 4000 RTP/AVP 0", "s=x"), "line 7: s= line not allowed"),
    "m 3 fields": (sdp("m=audio 4000 RTP/AVP"), "line 6: m= needs media, port, proto"),
    "m port word": (sdp("m=audio port RTP/AVP 0"), "line 6: m= port 'port'"),
    "m port big": (sdp("m=audio 65536 RTP/AVP 0"), "line 6: m= port '65536'"),
    "m port huge": (sdp("m=audio 99999999999999999999 RTP/AVP 0"), "line 6: m= port"),
    "m port neg": (sdp("m=audio -1 RTP/AVP 0"), "line 6: m= port '-1'"),
    "m port unicode": (sdp("m=audio ４０００ RTP/AVP 0"), "line 6: m= port"),
    "m count 0": (sdp("m=audio 4000/0 RTP/AVP 0"), "line 6: m= port count must be"),
    "m count word": (sdp("m=audio 4000/x RTP/AVP 0"), "line 6: m= port count 'x'"),
    "pt word": (sdp("m=audio 4000 RTP/AVP 0 PCMU"), "line 6: m= payload type 'PCMU'"),
    "pt 128": (sdp("m=audio 4000 RTP/AVP 128"), "line 6: m= payload type '128'"),
    "pt neg": (sdp("m=audio 4000 RTP/AVP -8"), "line 6: m= payload type '-8'"),
    "pt superscript": (sdp("m=audio 4000 RTP/AVP ²"), "line 6: m= payload type"),
    "bad proto": (sdp("m=audio 4000 RTP<AVP 0"), "line 6: m= proto"),
    "c fields": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4"), "line 7: c= needs 3 fields"),
    "c nettype": (sdp("m=audio 4000 RTP/AVP 0", "c=ATM IP4 1.2.3.4"), "line 7: c= network"),
    "c addrtype": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP5 1.2.3.4"), "line 7: c= address type"),
    "c octet": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 999.1.1.1"), "line 7: c= address"),
    "c v6 in v4": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 ::1"), "line 7: c= address '::1'"),
    "c v4 in v6": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP6 192.0.2.1"), "line 7: c= address"),
    "c junk": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 a$b"), "line 7: c= address"),
    "c ttl word": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP4 224.2.1.1/x"), "line 7: c= address"),
    "c slashes": (sdp("m=audio 4000 RTP/AVP 0", "c=IN IP6 ff15::1/1/2"), "too many '/'"),
    "no c": (
        b"v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nt=0 0\r\nm=audio 4000 RTP/AVP 0\r\n",
        "m= line #1 has no c=",
    ),
    "t word": (b"v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\nt=now 0\r\n", "line 3: t= needs two numbers"),
    "r first": (b"v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\nr=1 2 3\r\n", "line 3: r= before any t="),
    "b bad": (sdp("b=AS"), "line 6: malformed b= line"),
    "b word": (sdp("b=AS:lots"), "line 6: malformed b= line"),
    "attr name": (sdp("a=bad name:1"), "line 6: attribute name"),
    "attr empty": (sdp("a=:1"), "line 6: attribute name"),
    "nul": (sdp("a=tool:x\x00y"), "line 6: control character"),
    "bare cr": (sdp("a=tool:x\ry"), "line 6: control character"),
    "not utf-8": (HEAD.encode() + b"s=\xff\xfe\r\n", "not valid UTF-8"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_input_raises_sdp_error(case: str) -> None:
    data, message = MALFORMED[case]
    with pytest.raises(SdpError, match=re.escape(message)) as info:
        parse_sdp(data)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RemoteError)


def test_unencodable_str_input() -> None:
    with pytest.raises(SdpError, match="unencodable"):
        parse_sdp(HEAD + "s=\udcff\r\n")


def test_too_many_media_lines() -> None:
    lines = [f"m=audio {4000 + 2 * i} RTP/AVP 0" for i in range(17)]
    with pytest.raises(SdpError, match="more than 16 m= lines"):
        parse_sdp(sdp(*lines))
    assert len(parse_sdp(sdp(*lines[:16])).media) == 16


def test_oversized_body_is_refused_before_parsing() -> None:
    body = sdp(*["a=x:" + "y" * 1000] * 70)
    assert len(body) > MAX_SDP_BYTES
    with pytest.raises(SdpError, match="exceeds"):
        parse_sdp(body)
    with pytest.raises(SdpError, match="exceeds"):
        parse_sdp(body.decode())


def _timed(data: bytes) -> float:
    start = time.perf_counter()
    with pytest.raises(SdpError):
        parse_sdp(data)
    return time.perf_counter() - start


def test_hostile_inputs_fail_fast() -> None:
    rng = random.Random(4566)
    hostile = [
        b"a=x\r\n" * 100_000,
        HEAD.encode() + b"a=x\r\n" * 100_000,
        b"v=0\r\n" + b"\r\n" * 100_000,
        bytes(rng.randrange(256) for _ in range(60_000)),
        b"\x00" * 1_000_000,
        sdp("m=audio " + "9" * 50_000 + " RTP/AVP 0"),
        HEAD.encode() + b"m=audio 4000 RTP/AVP " + b"0 " * 30_000 + b"x\r\n",
    ]
    for data in hostile:
        assert _timed(data) < 0.25


def test_largest_legal_body_parses_quickly() -> None:
    attrs = [f"a=candidate:{i} 1 udp 2122260223 192.0.2.1 {50000 + i} typ host" for i in range(900)]
    body = sdp("m=audio 4000 RTP/AVP 0", *attrs)
    assert len(body) < MAX_SDP_BYTES
    start = time.perf_counter()
    parsed = parse_sdp(body)
    assert time.perf_counter() - start < 0.25
    assert len(parsed.media[0].attributes) == 900


@pytest.mark.parametrize("path", GOLDEN_FILES[:3], ids=lambda p: p.name)
def test_mutated_golden_bodies_never_raise_anything_but_sdp_error(path: Path) -> None:
    rng = random.Random(path.name)
    original = path.read_bytes()
    for _ in range(1500):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            pos = rng.randrange(len(data))
            if op == 0:
                data[pos] = rng.randrange(256)
            elif op == 1:
                del data[pos : pos + rng.randint(1, 8)]
            else:
                data[pos:pos] = bytes([rng.choice(b" :/=\r\n0-9aIPv")])
        try:
            parsed = parse_sdp(bytes(data))
        except SdpError:
            continue
        # Whatever parses must serialise to something that parses to the same thing.
        assert parse_sdp(parsed.serialize()) == parsed
        for media in parsed.media:
            media.rtpmaps(), media.ptime(), media.rtcp_port(), media.direction(parsed)

"""RFC 3264 offer/answer: codec choice, rejection, DTMF, hold, re-INVITE, kefu as offerer.

Golden answers live in golden/sdp/answers/; set KEFU_REGEN_GOLDEN=1 to rewrite them after a
deliberate change, then review the diff by eye.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from kefu.errors import ConfigError, SdpError
from kefu.sip.offer import accept_answer, make_offer
from kefu.sip.offer_answer import (
    OPUS_FMTP,
    Negotiated,
    NegotiationError,
    answer_offer,
    warning_for,
)
from kefu.sip.sdp import SessionDescription, parse_sdp
from kefu.sip.sdp_fields import Connection, MediaDescription

GOLDEN = Path(__file__).parent / "golden" / "sdp"
TESTDATA = Path(os.environ.get("KEFU_TESTDATA", "/work/shared/testdata"))
LOCAL = "198.51.100.7"
LOCAL6 = "2001:db8::1"


def offer_from(name: str) -> SessionDescription:
    return parse_sdp((GOLDEN / name).read_bytes())


def answer(offer: SessionDescription, **kwargs: object) -> Negotiated:
    options: dict[str, object] = {
        "local_address": LOCAL,
        "local_port": 40000,
        "session_id": 42,
        "session_version": 1,
    }
    options.update(kwargs)
    return answer_offer(offer, **options)  # type: ignore[arg-type]


def check_golden(name: str, desc: SessionDescription) -> None:
    path = GOLDEN / "answers" / name
    if os.environ.get("KEFU_REGEN_GOLDEN"):
        path.write_bytes(desc.serialize())
    assert desc.serialize() == path.read_bytes()


def g711_offer(*formats: str, direction: str = "sendrecv", version: int = 1) -> SessionDescription:
    rtpmaps = {"0": "PCMU/8000", "8": "PCMA/8000", "9": "G722/8000", "18": "G729/8000"}
    lines = [
        "v=0",
        f"o=vcc 77 {version} IN IP4 10.1.1.1",
        "s=-",
        "c=IN IP4 10.1.1.1",
        "t=0 0",
        f"m=audio 30000 RTP/AVP {' '.join(formats)}",
    ]
    lines += [f"a=rtpmap:{pt} {rtpmaps[pt]}" for pt in formats if pt in rtpmaps]
    if "101" in formats:
        lines += ["a=rtpmap:101 telephone-event/8000", "a=fmtp:101 0-16"]
    lines.append(f"a={direction}")
    return parse_sdp("\r\n".join(lines) + "\r\n")


# --- choosing a codec ----------------------------------------------------------------------


def test_vcc_offer_picks_offerers_first_codec_with_dtmf() -> None:
    result = answer(offer_from("vcc_g711_offer.sdp"))
    assert (result.codec, result.payload_type, result.clock_rate, result.channels) == (
        "PCMA",
        8,
        8000,
        1,
    )
    assert result.dtmf_payload_type == 101
    assert (result.remote_address, result.remote_port, result.remote_rtcp_port) == (
        "10.20.30.40",
        31000,
        31001,
    )
    assert (result.ptime, result.direction, result.media_index) == (20, "sendrecv", 0)
    assert result.fmtp is None
    assert result.sending and result.receiving
    assert result.local_sdp is result.answer and result.remote_sdp is result.offer
    check_golden("vcc_g711_answer.sdp", result.answer)


def test_our_preference_order_when_not_honouring_the_offer() -> None:
    offer = offer_from("vcc_g711_offer.sdp")
    assert answer(offer, honour_offer_order=False).codec == "PCMU"
    assert answer(offer, honour_offer_order=False, preferences=("PCMA", "PCMU")).codec == "PCMA"
    assert answer(offer, preferences=("pcmu",)).codec == "PCMU"


def test_opus_over_plain_rtp() -> None:
    result = answer(offer_from("opus_avp_offer.sdp"))
    assert (result.codec, result.payload_type, result.clock_rate, result.channels) == (
        "opus",
        96,
        48000,
        2,
    )
    assert result.fmtp == "stereo=0;sprop-stereo=0;useinbandfec=1"
    assert result.dtmf_payload_type == 101  # the 48 kHz one, matching Opus's clock
    assert result.remote_rtcp_port == 10001
    audio = result.answer.media[0]
    assert audio.fmtp(96) == OPUS_FMTP == "minptime=10;useinbandfec=1"
    assert audio.rtpmaps()[101].clock_rate == 48000
    check_golden("opus_avp_answer.sdp", result.answer)


def test_opus_without_48k_telephone_event_has_no_dtmf() -> None:
    offer = offer_from("opus_avp_offer.sdp")
    audio = offer.media[0]
    no_48k = replace(
        audio,
        formats=tuple(f for f in audio.formats if f != "101"),
        attributes=tuple(a for a in audio.attributes if not (a[1] or "").startswith("101 ")),
    )
    result = answer(replace(offer, media=(no_48k,)))
    assert result.codec == "opus" and result.dtmf_payload_type is None
    assert result.answer.media[0].formats == ("96",)


def test_g722_preferred_over_g711_when_we_choose() -> None:
    result = answer(g711_offer("0", "8", "9", "101"), honour_offer_order=False)
    assert (result.codec, result.payload_type, result.clock_rate) == ("G722", 9, 8000)
    assert result.dtmf_payload_type == 101


def test_dtmf_can_be_disabled() -> None:
    result = answer(offer_from("vcc_g711_offer.sdp"), dtmf=False)
    assert result.dtmf_payload_type is None
    assert result.answer.media[0].formats == ("8",)


def test_wrong_clock_rate_is_not_a_match() -> None:
    offer = parse_sdp(
        "v=0\r\no=- 1 1 IN IP4 10.1.1.1\r\ns=-\r\nc=IN IP4 10.1.1.1\r\nt=0 0\r\n"
        "m=audio 30000 RTP/AVP 96 97\r\na=rtpmap:96 PCMU/16000\r\na=rtpmap:97 PCMA/8000/2\r\n"
    )
    with pytest.raises(NegotiationError, match="no common codec"):
        answer(offer)


@pytest.mark.parametrize(("offered", "expected"), [(30, 30), (10, 10), (25, 20), (None, 20)])
def test_ptime(offered: int | None, expected: int) -> None:
    offer = g711_offer("0")
    if offered is not None:
        media = offer.media[0]
        offer = replace(
            offer, media=(replace(media, attributes=(*media.attributes, ("ptime", str(offered)))),)
        )
    result = answer(offer)
    assert result.ptime == expected
    assert result.answer.media[0].ptime() == expected


# --- rejecting streams ---------------------------------------------------------------------


def test_audio_video_offer_accepts_one_audio_and_rejects_the_rest() -> None:
    offer = offer_from("audio_video_offer.sdp")
    result = answer(offer)
    assert result.media_index == 2
    assert (result.codec, result.payload_type) == ("PCMU", 0)
    assert result.remote_address == "192.0.2.102"
    # The offer is recvonly, so we only send.
    assert result.direction == "sendonly" and result.sending and not result.receiving
    media = result.answer.media
    assert [(m.media, m.port, m.proto) for m in media] == [
        ("video", 0, "RTP/AVP"),
        ("audio", 0, "RTP/SAVP"),
        ("audio", 40000, "RTP/AVP"),
        ("audio", 0, "RTP/AVP"),
        ("image", 0, "udptl"),
    ]
    assert media[0].formats == ("31", "34") and media[4].formats == ("t38",)
    # RFC 3264 §6: the answer's t= equals the offer's.
    assert result.answer.timings == offer.timings
    check_golden("audio_video_answer.sdp", result.answer)


def test_rfc4475_sdp01_audio_accepted_video_rejected() -> None:
    path = TESTDATA / "rfc4475" / "sdp01.dat"
    if not path.exists():
        pytest.skip("RFC 4475 test data not available")
    offer = parse_sdp(path.read_bytes().split(b"\r\n\r\n", 1)[1])
    result = answer(offer)
    assert result.codec == "PCMU" and result.remote_port == 49217
    assert [m.port for m in result.answer.media] == [40000, 0]


def test_webrtc_offer_is_rejected_with_302() -> None:
    with pytest.raises(NegotiationError) as info:
        answer(offer_from("webrtc_opus_offer.sdp"))
    assert info.value.warn_code == 302 and info.value.status == 488
    assert warning_for(info.value) == (
        '302 kefu "Incompatible transport protocol: '
        'UDP/TLS/RTP/SAVPF audio is not supported, only RTP/AVP or RTP/SAVP"'
    )


def test_no_common_codec_is_305() -> None:
    with pytest.raises(NegotiationError) as info:
        answer(g711_offer("18"))
    assert isinstance(info.value, SdpError)
    assert warning_for(info.value) == '305 kefu "Incompatible media format: no common codec"'
    assert warning_for(info.value, agent="mrf.example.com").startswith("305 mrf.example.com ")


def test_no_audio_is_304() -> None:
    offer = offer_from("audio_video_offer.sdp")
    video_only = replace(offer, media=offer.media[:1])
    with pytest.raises(NegotiationError) as info:
        answer(video_only)
    assert warning_for(info.value) == '304 kefu "Media type not available: no audio stream offered"'
    disabled = replace(offer, media=(replace(offer.media[2], port=0),))
    with pytest.raises(NegotiationError, match="no audio stream"):
        answer(disabled)


def test_codec_failure_outranks_transport_failure() -> None:
    offer = offer_from("audio_video_offer.sdp")
    g729 = replace(offer.media[2], formats=("18",), attributes=())
    with pytest.raises(NegotiationError) as info:
        answer(replace(offer, media=(offer.media[1], g729)))
    assert info.value.warn_code == 305


def test_ipv6_offer() -> None:
    offer = offer_from("ipv6_offer.sdp")
    result = answer(offer, local_address=LOCAL6)
    assert result.remote_address == "2001:db8::20"
    assert (result.remote_rtcp_port, result.ptime) == (6101, 30)
    assert result.answer.connection == Connection(LOCAL6, "IP6")
    assert result.answer.origin.addr_type == "IP6"
    check_golden("ipv6_answer.sdp", result.answer)
    with pytest.raises(NegotiationError) as info:
        answer(offer)
    assert info.value.warn_code == 301


@pytest.mark.parametrize("name", ["ipv6-in-sdp", "ipv4-mapped-ipv6", "mult-ip-in-sdp"])
def test_rfc5118_offers(name: str) -> None:
    path = TESTDATA / "rfc5118" / name
    if not path.exists():
        pytest.skip("RFC 5118 test data not available")
    data = path.read_bytes()
    offer = parse_sdp(data[data.index(b"\n\n") + 2 :])
    if name == "mult-ip-in-sdp":
        result = answer(offer)
        assert (result.remote_address, result.codec) == ("192.0.2.1", "PCMU")
        assert [m.port for m in result.answer.media] == [40000, 0]
    else:
        # G726-32 only: nothing in common, whatever the address family.
        with pytest.raises(NegotiationError, match="no common codec"):
            answer(offer, local_address=LOCAL6)


def test_parse_errors_get_warning_399_with_quotes_escaped() -> None:
    with pytest.raises(SdpError) as info:
        parse_sdp(b'v=0\r\nx="\x01\r\n')
    warning = warning_for(info.value)
    assert warning.startswith('399 kefu "Bad SDP: SDP line 2: control character')
    error = SdpError('bad "quote" and \\ backslash\r\n')
    assert warning_for(error) == '399 kefu "Bad SDP: bad \\"quote\\" and \\\\ backslash  "'


# --- direction and hold --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offered", "policy", "ours"),
    [
        ("sendrecv", "sendrecv", "sendrecv"),
        ("sendonly", "sendrecv", "recvonly"),
        ("recvonly", "sendrecv", "sendonly"),
        ("inactive", "sendrecv", "inactive"),
        ("sendrecv", "recvonly", "recvonly"),
        ("sendrecv", "sendonly", "sendonly"),
        ("sendrecv", "inactive", "inactive"),
        ("recvonly", "recvonly", "inactive"),
    ],
)
def test_direction_mirrors_offer_within_policy(offered: str, policy: str, ours: str) -> None:
    result = answer(g711_offer("0", direction=offered), direction_policy=policy)
    assert result.direction == ours
    assert result.answer.media[0].direction(result.answer) == ours


def test_old_style_hold_with_0000() -> None:
    result = answer(offer_from("hold_0000_offer.sdp"))
    assert result.direction == "recvonly"
    assert result.remote_address == "0.0.0.0"
    assert not result.sending
    assert result.dtmf_payload_type == 101
    check_golden("hold_0000_answer.sdp", result.answer)


def test_reinvite_hold_unhold_and_refresh() -> None:
    first = answer(offer_from("vcc_g711_offer.sdp"))
    held = answer(
        offer_from("vcc_hold_sendonly_offer.sdp"),
        previous=first,
        session_id=None,
        session_version=None,
    )
    assert held.direction == "recvonly"
    assert held.codec == "PCMA"
    assert held.answer.origin.session_id == 42
    assert held.answer.origin.session_version == 2
    check_golden("vcc_hold_answer.sdp", held.answer)

    unheld = answer(offer_from("vcc_g711_offer.sdp"), previous=held)
    assert unheld.direction == "sendrecv"
    assert unheld.answer.origin.session_version == 3
    assert replace(unheld.answer, origin=first.answer.origin) == first.answer

    # A session refresh with an unchanged offer gets a byte-identical answer (RFC 3264 §8).
    refreshed = answer(offer_from("vcc_g711_offer.sdp"), previous=unheld)
    assert refreshed.answer == unheld.answer
    assert refreshed.answer.serialize() == unheld.answer.serialize()


def test_reinvite_codec_change() -> None:
    first = answer(g711_offer("8", "0", "101"))
    assert first.codec == "PCMA"
    changed = answer(g711_offer("0", "101", version=2), previous=first)
    assert (changed.codec, changed.payload_type) == ("PCMU", 0)
    assert changed.answer.origin.session_id == first.answer.origin.session_id
    assert changed.answer.origin.session_version == 2


def test_reinvite_with_new_local_port_bumps_version() -> None:
    first = answer(g711_offer("0"))
    moved = answer(g711_offer("0"), previous=first, local_port=40002)
    assert moved.answer.media[0].port == 40002
    assert moved.answer.origin.session_version == 2


def test_session_id_required_for_first_answer() -> None:
    with pytest.raises(TypeError, match="session_id"):
        answer_offer(g711_offer("0"), local_address=LOCAL, local_port=40000)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"preferences": ("G729",)}, "preferences"),
        ({"preferences": ()}, "preferences"),
        ({"preferences": ("telephone-event",)}, "preferences"),
        ({"local_address": "media.example.com"}, "local_address"),
        ({"local_port": 0}, "local_port"),
        ({"local_port": 70000}, "local_port"),
        ({"direction_policy": "both"}, "direction_policy"),
    ],
)
def test_bad_local_configuration(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        answer(g711_offer("0"), **kwargs)
    assert info.value.key == key


# --- kefu as offerer -----------------------------------------------------------------------


def test_make_offer_golden() -> None:
    offer = make_offer(local_address=LOCAL, local_port=41000, session_id=7, session_version=1)
    audio = offer.media[0]
    assert audio.formats == ("0", "8", "9", "111", "101", "110")
    assert audio.rtpmaps()[111].channels == 2
    assert audio.fmtp(111) == OPUS_FMTP
    assert audio.fmtp(101) == "0-16"
    check_golden("kefu_offer.sdp", offer)


def test_make_offer_options() -> None:
    offer = make_offer(
        local_address=LOCAL6,
        local_port=41000,
        codecs=("PCMA",),
        dtmf=False,
        direction="sendonly",
        session_id=7,
        session_version=3,
        ptime=40,
    )
    audio = offer.media[0]
    assert audio.formats == ("8",)
    assert (audio.ptime(), audio.direction(offer)) == (40, "sendonly")
    assert offer.connection == Connection(LOCAL6, "IP6")
    assert (offer.origin.session_id, offer.origin.session_version) == (7, 3)
    for bad in ({"codecs": ("G729",)}, {"ptime": 25}, {"direction": "up"}, {"local_port": 0}):
        kwargs: dict[str, object] = {
            "local_address": LOCAL,
            "local_port": 41000,
            "session_id": 7,
            "session_version": 1,
        }
        with pytest.raises(ConfigError):
            make_offer(**(kwargs | bad))  # type: ignore[arg-type]


def test_offer_answer_loop_between_two_kefus() -> None:
    offer = make_offer(local_address=LOCAL, local_port=41000, session_id=7, session_version=1)
    theirs = answer_offer(
        offer, local_address="203.0.113.9", local_port=5004, session_id=9, session_version=1
    )
    ours = accept_answer(offer, theirs.answer)
    assert (theirs.codec, ours.codec) == ("PCMU", "PCMU")
    assert ours.payload_type == 0 and ours.dtmf_payload_type == 101
    assert (ours.remote_address, ours.remote_port, ours.remote_rtcp_port) == (
        "203.0.113.9",
        5004,
        5005,
    )
    assert ours.local_is_offerer and ours.local_sdp is offer and ours.remote_sdp is theirs.answer
    opus_first = make_offer(
        local_address=LOCAL,
        local_port=41000,
        codecs=("opus", "PCMU"),
        session_id=7,
        session_version=2,
    )
    theirs = answer_offer(
        opus_first, local_address="203.0.113.9", local_port=5004, session_id=9, session_version=2
    )
    ours = accept_answer(opus_first, theirs.answer)
    assert (ours.codec, ours.payload_type, ours.dtmf_payload_type) == ("opus", 111, 110)
    assert ours.fmtp == OPUS_FMTP


def _vcc_answer(*media_lines: str) -> SessionDescription:
    head = "v=0\r\no=vcc 5 5 IN IP4 10.9.9.9\r\ns=-\r\nc=IN IP4 10.9.9.9\r\nt=0 0\r\n"
    return parse_sdp(head + "".join(line + "\r\n" for line in media_lines))


def test_accept_answer_uses_answerers_payload_type_and_direction() -> None:
    offer = make_offer(local_address=LOCAL, local_port=41000, session_id=7, session_version=1)
    remote = _vcc_answer(
        "m=audio 20000 RTP/AVP 8 96",
        "a=rtpmap:8 pcma/8000",
        "a=rtpmap:96 telephone-event/8000",
        "a=ptime:30",
        "a=sendonly",
    )
    result = accept_answer(offer, remote)
    assert (result.codec, result.payload_type, result.dtmf_payload_type) == ("PCMA", 8, 96)
    assert (result.ptime, result.direction) == (30, "recvonly")


def test_accept_answer_without_dtmf_offer_ignores_their_dtmf() -> None:
    offer = make_offer(
        local_address=LOCAL, local_port=41000, dtmf=False, session_id=7, session_version=1
    )
    remote = _vcc_answer("m=audio 20000 RTP/AVP 0 101", "a=rtpmap:101 telephone-event/8000")
    assert accept_answer(offer, remote).dtmf_payload_type is None


@pytest.mark.parametrize(
    ("media_lines", "code"),
    [
        (("m=audio 0 RTP/AVP 0",), 304),
        (("m=audio 20000 RTP/AVP 18", "a=rtpmap:18 G729/8000"), 305),
        (("m=audio 20000 RTP/SAVP 0",), 302),
        (("m=audio 20000 RTP/AVP 0", "m=video 0 RTP/AVP 31"), 304),
    ],
)
def test_accept_answer_rejects(media_lines: tuple[str, ...], code: int) -> None:
    offer = make_offer(local_address=LOCAL, local_port=41000, session_id=7, session_version=1)
    with pytest.raises(NegotiationError) as info:
        accept_answer(offer, _vcc_answer(*media_lines))
    assert info.value.warn_code == code


def test_reinvite_as_answerer_after_offering_keeps_our_origin() -> None:
    offer = make_offer(local_address=LOCAL, local_port=41000, session_id=7, session_version=4)
    first = accept_answer(offer, _vcc_answer("m=audio 20000 RTP/AVP 0"))
    reoffer = _vcc_answer("m=audio 20000 RTP/AVP 0", "a=sendonly")
    held = answer_offer(reoffer, local_address=LOCAL, local_port=41000, previous=first)
    assert (held.answer.origin.session_id, held.answer.origin.session_version) == (7, 5)
    assert held.direction == "recvonly"


def test_answer_media_is_a_plain_media_description() -> None:
    result = answer(g711_offer("0"))
    assert isinstance(result.answer.media[0], MediaDescription)
    assert parse_sdp(result.answer.serialize()) == result.answer

"""kefu.sfu.stable_ids on SDP text alone: server offers keep the negotiated RTP ids."""

from __future__ import annotations

from pathlib import Path

from aiortc.sdp import SessionDescription

from kefu.sfu.stable_ids import IdPlan, rewrite_offer

GOLDEN = Path(__file__).with_name("golden")


def golden(name: str) -> str:
    """SDP lines end in CRLF (RFC 8866 §5), whatever git did to the file."""
    return (GOLDEN / name).read_text().replace("\r\n", "\n").replace("\n", "\r\n")


AIORTC_OFFER = golden("aiortc_offer.sdp")  # aiortc's: two audio m-sections and data
CHROMIUM_OFFER = golden("chromium_offer.sdp")  # Chromium 156, call.js: mic + channel
MID = "urn:ietf:params:rtp-hdrext:sdes:mid"
LEVEL = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"


def ids(sdp: str) -> list[tuple[list[int], dict[str, int], dict[int, str]]]:
    """Per RTP m-section: format list, extmap uri -> id, payload type -> codec name."""
    out = []
    for media in SessionDescription.parse(sdp).media:
        if media.kind in ("audio", "video"):
            extmap = {e.uri: e.id for e in media.rtp.headerExtensions}
            names = {c.payloadType: c.name.lower() for c in media.rtp.codecs}
            out.append(([int(f) for f in media.fmt], extmap, names))
    return out


def chromium_plan() -> IdPlan:
    media = SessionDescription.parse(CHROMIUM_OFFER).media[0]
    return IdPlan.negotiated([(media.rtp.codecs, media.rtp.headerExtensions)])


def test_nothing_negotiated_changes_nothing() -> None:
    rewrite = rewrite_offer(AIORTC_OFFER, IdPlan())
    assert rewrite.sdp == AIORTC_OFFER
    assert rewrite.extmap == {MID: 1, LEVEL: 2}


def test_chromium_ids_kept_in_every_audio_section() -> None:
    rewrite = rewrite_offer(AIORTC_OFFER, chromium_plan())
    sections = ids(rewrite.sdp)
    assert len(sections) == 2
    for fmt, extmap, names in sections:
        # Chromium: opus 111, ssrc-audio-level 1, sdes:mid 4 (aiortc alone: 96, 2, 1)
        assert fmt == [111, 9, 0, 8]
        assert names == {111: "opus", 9: "g722", 0: "pcmu", 8: "pcma"}
        assert extmap == {MID: 4, LEVEL: 1}
    assert rewrite.payload_types[0] == ("0", {96: 111, 9: 9, 0: 0, 8: 8})
    # everything else in the offer is untouched
    strip = [
        line for line in rewrite.sdp.splitlines() if "111" not in line and "extmap" not in line
    ]
    keep = [line for line in AIORTC_OFFER.splitlines() if "96" not in line and "extmap" not in line]
    assert strip == keep


def test_clashing_new_ids_move_to_free_ones() -> None:
    plan = IdPlan()
    plan.extmap["urn:example:other"] = 1  # a URI this offer does not carry holds id 1
    plan.payload_types[("video/vp8", 90000, 1, ())] = 96  # and PT 96 is VP8's
    plan.pt_owner[96] = ("video/vp8", 90000, 1, ())
    rewrite = rewrite_offer(AIORTC_OFFER, plan)
    for fmt, extmap, names in ids(rewrite.sdp):
        assert extmap == {MID: 2, LEVEL: 3}
        assert fmt[0] == 97 and names[97] == "opus"  # the first free dynamic type
    assert rewrite.extmap == {"urn:example:other": 1, MID: 2, LEVEL: 3}


VIDEO_OFFER = "\r\n".join(
    [
        "v=0",
        "o=- 1 1 IN IP4 0.0.0.0",
        "s=-",
        "t=0 0",
        "a=group:BUNDLE 0",
        "m=video 9 UDP/TLS/RTP/SAVPF 96 97",
        "c=IN IP4 0.0.0.0",
        "a=sendrecv",
        "a=extmap:1 urn:ietf:params:rtp-hdrext:sdes:mid",
        "a=mid:0",
        "a=rtcp-mux",
        "a=rtpmap:96 VP8/90000",
        "a=rtcp-fb:96 nack",
        "a=rtpmap:97 rtx/90000",
        "a=fmtp:97 apt=96",
        "a=ice-ufrag:abcd",
        "a=ice-pwd:abcdefghijklmnopqrstuvwx",
        "a=fingerprint:sha-256 " + ":".join(["AA"] * 32),
        "a=setup:actpass",
        "",
    ]
)


def test_rtx_follows_its_codec() -> None:
    negotiated = SessionDescription.parse(
        VIDEO_OFFER.replace(" 96 97", " 100 101")
        .replace(":96 ", ":100 ")
        .replace(":97 ", ":101 ")
        .replace("apt=96", "apt=100")
    ).media[0]
    plan = IdPlan.negotiated([(negotiated.rtp.codecs, negotiated.rtp.headerExtensions)])
    (fmt, _, names), *_ = ids(rewrite_offer(VIDEO_OFFER, plan).sdp)
    assert fmt == [100, 101] and names == {100: "vp8", 101: "rtx"}
    media = SessionDescription.parse(rewrite_offer(VIDEO_OFFER, plan).sdp).media[0]
    assert media.rtp.codecs[1].parameters["apt"] == 100
    assert [fb.type for fb in media.rtp.codecs[0].rtcpFeedback] == ["nack"]

"""Rebuild the committed seed corpus under tests/fuzz/corpus/<target>/.

    .venv/bin/python tests/fuzz/make_corpus.py

Valid inputs come from the repository's own test data (RFC 4475/5118 torture messages, the
SIP and SDP golden files, the RTP/RTCP golden packets) and from the fake trunk's request
builder; each target also gets mutated copies made with a fixed seed, so the output is the
same on every run. Crashes the fuzzers find are added by hand as ``crash-*.bin`` files.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS.parent)]

from fuzz.mutations import CORPUS, mutate  # noqa: E402
from helpers.sip_trunk import SDP_OFFER, invite, request  # noqa: E402

from kefu.rtp.packet import RtpExtension, RtpPacket  # noqa: E402
from kefu.rtp.rtcp import Bye, ReceiverReport, ReportBlock, Sdes, SenderReport  # noqa: E402
from kefu.sip.auth import DigestServer, answer_challenge  # noqa: E402

MUTANTS = 20


def _hex(path: Path) -> bytes:
    lines = [line.split("#", 1)[0] for line in path.read_text().splitlines()]
    return bytes.fromhex(" ".join(lines))


def sip_messages() -> list[tuple[str, bytes]]:
    data = [
        (f"{p.parent.name}-{p.stem}", p.read_bytes())
        for p in sorted((TESTS / "testdata").glob("rfc*/*"))
        if p.is_file() and p.suffix != ".md"
    ]
    data += [(f"golden-{p.stem}", p.read_bytes()) for p in sorted(TESTS.glob("sip/golden/*.sip"))]
    return data


def ua_requests() -> list[tuple[str, bytes]]:
    server = DigestServer("kefu", {"vcc": "s3cret"}, b"k" * 32)
    auth = answer_challenge(
        server.challenge(0.0), "INVITE", "sip:4001@127.0.0.1:5070", "vcc", "s3cret", "c0ffee"
    )
    return [
        ("invite", invite()),
        ("invite-timer", invite(extra=(("Session-Expires", "1800"), ("Supported", "timer")))),
        ("invite-rr", invite(extra=(("Record-Route", "<sip:p1.example;lr>"),))),
        ("invite-auth", invite(extra=(("Authorization", auth),))),
        ("options", request("OPTIONS")),
        ("options-require", request("OPTIONS", extra=(("Require", "100rel, timer"),))),
        ("bye", request("BYE", to_tag="t1")),
        ("ack", request("ACK", to_tag="t1")),
        ("cancel", request("CANCEL")),
        (
            "info",
            request(
                "INFO", to_tag="t1", body="Signal=5\r\n", content_type="application/dtmf-relay"
            ),
        ),
        ("refer", request("REFER", to_tag="t1", extra=(("Refer-To", "<sip:q@127.0.0.1>"),))),
        (
            "notify",
            request(
                "NOTIFY", to_tag="t1", body="SIP/2.0 200 OK\r\n", content_type="message/sipfrag"
            ),
        ),
        ("update", request("UPDATE", to_tag="t1", extra=(("Session-Expires", "90"),))),
        ("register", request("REGISTER")),
        ("unknown", request("FROBNICATE")),
        ("attack-require-cr", request("OPTIONS", extra=(("Require", "foo\rbar"),))),
        ("attack-require-space", invite(extra=(("Require", "foo bar"),))),
        ("attack-via-cr", request("OPTIONS", via_host="127.0.0.1:5080\rX: 1")),
        ("attack-timestamp-cr", invite(extra=(("Timestamp", "1\rX: 1"),))),
        (
            "response-200",
            b"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKx\r\n"
            b"From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: x\r\nCSeq: 1 BYE\r\n"
            b"Content-Length: 0\r\n\r\n",
        ),
    ]


def sdps() -> list[tuple[str, bytes]]:
    files = sorted(TESTS.glob("sip/golden/sdp/**/*.sdp"))
    return [(p.stem, p.read_bytes()) for p in files] + [("trunk-offer", SDP_OFFER.encode())]


def rtps() -> list[tuple[str, bytes]]:
    data = [(p.stem, _hex(p)) for p in sorted(TESTS.glob("rtp/golden/rtp_*.hex"))]
    packets = [
        RtpPacket(0, 1, 160, 0x1234, b"\xff" * 160),
        RtpPacket(8, 65535, 0xFFFFFFFF, 1, b"\xd5" * 20, marker=True),
        RtpPacket(101, 7, 800, 2, bytes([5, 0x80, 0, 160]), marker=True),
        RtpPacket(111, 9, 960, 3, b"opus", csrc=(1, 2, 3)),
        RtpPacket(96, 10, 1, 4, b"x", extension=RtpExtension(0xBEDE, b"\x10\xff\x00\x00")),
        RtpPacket(0, 11, 2, 5, b"pad", padding=4),
    ]
    return data + [(f"built-{i}", bytes(p)) for i, p in enumerate(packets)]


def rtcps() -> list[tuple[str, bytes]]:
    data = [(p.stem, _hex(p)) for p in sorted(TESTS.glob("rtp/golden/rtcp_*.hex"))]
    block = ReportBlock(7, 3, 10, 1000, 20, 0x1234, 0x5678)
    packets = [
        SenderReport(1, 0xE000000080000000, 160, 10, 1600, (block,)),
        ReceiverReport(2, (block, block)),
        ReceiverReport(3, ()),
        Sdes.for_cname(4, "kefu@host"),
        Bye((5, 6), b"bye"),
    ]
    data += [(f"built-{i}", bytes(p)) for i, p in enumerate(packets)]
    data.append(("compound", b"".join(bytes(p) for p in packets)))
    data.append(("unknown-psfb", bytes.fromhex("81ce0002 00000001 00000002")))
    return data


def digests() -> list[tuple[str, bytes]]:
    server = DigestServer("kefu", {"vcc": "s3cret"}, b"k" * 32, opaque="op")
    ch = server.challenge(0.0)
    values = [
        ("challenge", ch),
        ("challenge-md5-noqop", server.challenge(0.0, "MD5", qop=())),
        ("challenge-stale", server.challenge(0.0, stale=True)),
        ("answer", answer_challenge(ch, "INVITE", "sip:4001@kefu", "vcc", "s3cret", "c", 1)),
        ("answer-nc2", answer_challenge(ch, "INVITE", "sip:4001@kefu", "vcc", "s3cret", "c", 2)),
        (
            "rfc7616",
            'Digest username="Mufasa", realm="http-auth@example.org", '
            'uri="/dir/index.html", algorithm=SHA-256, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcC", '
            'nc=00000001, cnonce="f2/wE4q74E6zIJEtWaHKaf5wv", qop=auth, response="7539", '
            'opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"',
        ),
        ("escapes", 'Digest username="a\\"b,c", realm="r", nonce="n", uri="sip:x", response="0"'),
        (
            "userhash",
            'Digest username="abc", userhash=true, realm="r", nonce="n", uri="sip:x", '
            'response="0", algorithm=SHA-512-256-sess',
        ),
        ("basic", "Basic Zm9vOmJhcg=="),
        ("empty", ""),
        ("dup", 'Digest realm="a", realm="b"'),
        ("unterminated", 'Digest realm="a\\'),
    ]
    return [(name, v.encode()) for name, v in values]


def write(target: str, seeds: list[tuple[str, bytes]], rng: random.Random) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("seed-*.bin"):
        old.unlink()
    blobs = tuple(b for _, b in seeds)
    for i, (name, blob) in enumerate(seeds):
        (folder / f"seed-{i:03d}-{name}.bin").write_bytes(blob)
    for i in range(MUTANTS):
        blob = blobs[rng.randrange(len(blobs))]
        for _ in range(1 + rng.randrange(3)):
            blob = mutate(blob, rng.randrange, blobs)
        (folder / f"seed-m{i:02d}.bin").write_bytes(blob)


def main() -> None:
    rng = random.Random(4475)
    write("sip_message", sip_messages(), rng)
    write("ua", ua_requests(), rng)
    write("sdp", sdps(), rng)
    write("rtp", rtps(), rng)
    write("rtcp", rtcps(), rng)
    write("digest", digests(), rng)


if __name__ == "__main__":
    main()

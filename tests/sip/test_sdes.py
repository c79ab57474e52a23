"""SDES (RFC 4568): the a=crypto attribute against golden pairs, and SRTP offer/answer.

Golden pairs: golden/sdes/crypto.tsv (value, then what kefu writes back and whether it can
use the line, or the exact error). The SRTP answer is golden/sdp/answers/srtp_answer.sdp.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from helpers.golden import read_pairs

from kefu.sip import sdes
from kefu.sip.offer import accept_answer, make_offer
from kefu.sip.offer_answer import NegotiationError, answer_offer
from kefu.sip.sdes import CryptoAttribute, SrtpKeys
from kefu.sip.sdp import SessionDescription, parse_sdp

GOLDEN = Path(__file__).parent / "golden"
LOCAL = "198.51.100.7"
RFC_KEY = "PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR"
OUR_KEY = bytes(range(30))


@pytest.mark.parametrize(("value", "expected"), read_pairs(GOLDEN / "sdes" / "crypto.tsv"))
def test_crypto_attribute_golden(value: str, expected: str) -> None:
    if expected.startswith("error: "):
        with pytest.raises(ValueError) as info:
            CryptoAttribute.parse(value)
        assert str(info.value) == expected.removeprefix("error: ")
        return
    line = CryptoAttribute.parse(value)
    usable = "usable" if line.usable else "unusable"
    assert f"{line.serialize()} {usable}" == expected
    # What kefu writes parses back to the same value (extra keys are not written).
    again = CryptoAttribute.parse(line.serialize())
    assert again.serialize() == line.serialize() and again.key == line.key


def test_crypto_key_is_key_and_salt() -> None:
    line = CryptoAttribute.parse(f"7 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:32")
    assert (line.tag, line.lifetime, line.mki) == (7, "2^20", "1:32")
    assert line.key == base64.b64decode(RFC_KEY) and len(line.key) == 30


def test_keys_never_reach_a_log_line() -> None:
    keys = SrtpKeys("AES_CM_128_HMAC_SHA1_80", OUR_KEY, OUR_KEY, 1)
    assert "\\x00" not in repr(keys) and base64.b64encode(OUR_KEY).decode() not in repr(keys)


def _offer(proto: str, *crypto: str, extra: tuple[str, ...] = ()) -> SessionDescription:
    lines = [
        "v=0",
        "o=vcc 77 1 IN IP4 10.1.1.1",
        "s=-",
        "c=IN IP4 10.1.1.1",
        "t=0 0",
        *extra,
        f"m=audio 30000 {proto} 0 8 101",
        "a=rtpmap:101 telephone-event/8000",
        "a=fmtp:101 0-16",
        *(f"a=crypto:{c}" for c in crypto),
    ]
    return parse_sdp("\r\n".join(lines) + "\r\n")


def _answer(offer: SessionDescription, **kw: object) -> object:
    options: dict[str, object] = {
        "local_address": LOCAL,
        "local_port": 40000,
        "session_id": 42,
        "session_version": 1,
        "srtp_key": OUR_KEY,
    }
    options.update(kw)
    return answer_offer(offer, **options)  # type: ignore[arg-type]


def test_savp_offer_is_answered_with_one_matching_crypto_line() -> None:
    offer = _offer(
        "RTP/SAVP",
        f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:32",  # MKI: skipped
        "2 AEAD_AES_256_GCM inline:" + "A" * 58,  # unsupported suite: skipped
        f"3 AES_CM_128_HMAC_SHA1_32 inline:{RFC_KEY}",
    )
    result = _answer(offer)
    keys = result.srtp  # type: ignore[attr-defined]
    assert keys == SrtpKeys("AES_CM_128_HMAC_SHA1_32", OUR_KEY, base64.b64decode(RFC_KEY), 3)
    media = result.answer.media[0]  # type: ignore[attr-defined]
    assert media.proto == "RTP/SAVP"
    expected = f"3 AES_CM_128_HMAC_SHA1_32 inline:{base64.b64encode(OUR_KEY).decode()}"
    assert media.attribute_values("crypto") == (expected,)
    path = GOLDEN / "sdp" / "answers" / "srtp_answer.sdp"
    assert result.answer.serialize() == path.read_bytes()  # type: ignore[attr-defined]


def test_savp_offer_without_usable_crypto_is_488_305() -> None:
    offer = _offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}|2^20|1:32")
    with pytest.raises(NegotiationError) as info:
        _answer(offer)
    assert info.value.status == 488 and info.value.warn_code == 305
    assert "no usable a=crypto line" in str(info.value)
    with pytest.raises(NegotiationError):
        _answer(_offer("RTP/SAVP"))  # no crypto line at all


def test_policy_required_refuses_plain_rtp_and_off_refuses_srtp() -> None:
    with pytest.raises(NegotiationError) as info:
        _answer(_offer("RTP/AVP"), srtp="required")
    assert info.value.warn_code == 302 and "requires RTP/SAVP" in str(info.value)
    with pytest.raises(NegotiationError) as info:
        _answer(_offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}"), srtp="off")
    assert info.value.warn_code == 302 and "SRTP off" in str(info.value)
    plain = _answer(_offer("RTP/AVP"))
    assert plain.srtp is None  # type: ignore[attr-defined]
    assert not plain.answer.media[0].attribute_values("crypto")  # type: ignore[attr-defined]


def test_required_accepts_the_srtp_line_of_a_mixed_offer() -> None:
    plain = "\r\n".join(["m=audio 30002 RTP/AVP 0"])
    offer = parse_sdp(
        bytes(_offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}")).decode()
        + plain
        + "\r\n"
    )
    result = _answer(offer, srtp="required")
    assert result.media_index == 0 and result.srtp is not None  # type: ignore[attr-defined]
    assert [m.port for m in result.answer.media] == [40000, 0]  # type: ignore[attr-defined]


def test_refresh_reinvite_keeps_our_key_and_the_answer() -> None:
    offer = _offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{RFC_KEY}")
    first = answer_offer(
        offer, local_address=LOCAL, local_port=40000, session_id=1, session_version=1
    )
    again = answer_offer(offer, local_address=LOCAL, local_port=40000, previous=first)
    assert again.srtp == first.srtp
    assert again.answer == first.answer  # same version: nothing changed (RFC 3264 §8)
    new_key = base64.b64encode(bytes(30)).decode()
    rekeyed = answer_offer(
        _offer("RTP/SAVP", f"1 AES_CM_128_HMAC_SHA1_80 inline:{new_key}"),
        local_address=LOCAL,
        local_port=40000,
        previous=first,
    )
    assert rekeyed.srtp is not None and first.srtp is not None
    assert rekeyed.srtp.remote_key == bytes(30)
    assert rekeyed.srtp.local_key == first.srtp.local_key
    # Only the peer's key changed: kefu's own description, and so its version, did not.
    assert rekeyed.answer == first.answer


def test_kefu_srtp_offer_and_the_peers_answer() -> None:
    keys = [bytes([1]) * 30, bytes([2]) * 30]
    offer = make_offer(
        local_address=LOCAL, local_port=41000, session_id=7, session_version=1, srtp_keys=keys
    )
    media = offer.media[0]
    assert media.proto == "RTP/SAVP"
    lines = [CryptoAttribute.parse(v or "") for v in media.attribute_values("crypto")]
    assert [(c.tag, c.suite, c.key) for c in lines] == [
        (1, "AES_CM_128_HMAC_SHA1_80", keys[0]),
        (2, "AES_CM_128_HMAC_SHA1_32", keys[1]),
    ]
    theirs = base64.b64encode(bytes([9]) * 30).decode()
    answer = parse_sdp(
        "v=0\r\no=vcc 1 1 IN IP4 10.1.1.1\r\ns=-\r\nc=IN IP4 10.1.1.1\r\nt=0 0\r\n"
        "m=audio 20000 RTP/SAVP 0\r\n"
        f"a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:{theirs}\r\n"
    )
    result = accept_answer(offer, answer)
    assert result.srtp == SrtpKeys("AES_CM_128_HMAC_SHA1_32", keys[1], bytes([9]) * 30, 2)
    wrong = parse_sdp(bytes(answer).decode().replace("crypto:2", "crypto:5"))
    with pytest.raises(NegotiationError) as info:
        accept_answer(offer, wrong)
    assert info.value.warn_code == 305


def test_new_keys_are_random_and_sized() -> None:
    a, b = sdes.new_offer_keys()
    assert len(a) == len(b) == sdes.KEY_LENGTH and a != b

"""Digest authentication: RFC 7616 / RFC 2617 vectors, parsing, server round trips."""

from __future__ import annotations

import pytest

from kefu.errors import SipParseError
from kefu.sip.auth import (
    DigestAlgorithm,
    DigestChallenge,
    DigestCredentials,
    DigestServer,
    answer_challenge,
    compute_response,
    parse_auth_params,
)
from kefu.sip.uri import SipUri

# RFC 7616 §3.9.1
RFC7616_CHALLENGE = (
    'Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm={alg}, '
    'nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", '
    'opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"'
)
RFC7616_CNONCE = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"
RFC7616_RESPONSES = {
    "MD5": "8ca523f5e9506fed4657c9700eebdbec",
    "SHA-256": "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
}
SECRET = b"0123456789abcdef-test-secret"


@pytest.mark.parametrize("alg", ["MD5", "SHA-256"])
def test_rfc7616_example_vectors(alg: str) -> None:
    value = answer_challenge(
        RFC7616_CHALLENGE.format(alg=alg),
        "GET",
        "/dir/index.html",
        "Mufasa",
        "Circle of Life",
        RFC7616_CNONCE,
        1,
    )
    cr = DigestCredentials.parse(value)
    assert cr.response == RFC7616_RESPONSES[alg]
    assert cr.qop == "auth"
    assert cr.nc == 1
    assert cr.opaque == "FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"
    assert "nc=00000001" in value


def test_rfc2617_example_vector() -> None:
    resp = compute_response(
        DigestAlgorithm.MD5,
        username="Mufasa",
        realm="testrealm@host.com",
        password="Circle Of Life",
        method="GET",
        uri="/dir/index.html",
        nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093",
        qop="auth",
        cnonce="0a4f113b",
        nc=1,
    )
    assert resp == "6629fae49393a05397450978507c4ef1"


def test_parse_rfc7616_authorization_header() -> None:
    value = (
        'Digest username="Mufasa",\r\n realm="http-auth@example.org",\r\n'
        ' uri="/dir/index.html", algorithm=SHA-256,\r\n'
        ' nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", nc=00000001,\r\n'
        f' cnonce="{RFC7616_CNONCE}", qop=auth,\r\n'
        f' response="{RFC7616_RESPONSES["SHA-256"]}",\r\n'
        ' opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"'
    )
    cr = DigestCredentials.parse(value)
    assert cr.algorithm is DigestAlgorithm.SHA256
    assert cr.username == "Mufasa"
    assert cr.uri == "/dir/index.html"
    # Serialising and re-parsing keeps every field.
    assert DigestCredentials.parse(str(cr)) == cr


def test_parse_quoted_strings_with_escapes_and_commas() -> None:
    scheme, p = parse_auth_params(
        'Digest realm="a, \\"b\\" c",nonce=abc ,  , opaque="" , QOP="auth,auth-int"'
    )
    assert scheme == "Digest"
    assert p == {"realm": 'a, "b" c', "nonce": "abc", "opaque": "", "qop": "auth,auth-int"}


@pytest.mark.parametrize(
    "value",
    [
        "",
        'Digest realm="unterminated',
        'Digest realm="x" nonce="y"',
        "Digest realm",
        'Digest realm="a", realm="b"',
        'Digest realm="a\\',
    ],
)
def test_parse_rejects_malformed(value: str) -> None:
    with pytest.raises(SipParseError):
        parse_auth_params(value)


def test_challenge_roundtrip_and_unknown_algorithm() -> None:
    ch = DigestChallenge.parse(RFC7616_CHALLENGE.format(alg="SHA-256") + ", stale=TRUE")
    assert ch.qop == ("auth", "auth-int")
    assert ch.stale
    assert DigestChallenge.parse(str(ch)) == ch
    with pytest.raises(SipParseError, match="algorithm"):
        DigestChallenge.parse('Digest realm="r", nonce="n", algorithm=SHA-1')
    with pytest.raises(SipParseError, match="scheme"):
        DigestChallenge.parse('Basic realm="r"')


@pytest.mark.parametrize("alg", list(DigestAlgorithm))
def test_server_roundtrip_every_algorithm(alg: DigestAlgorithm) -> None:
    server = DigestServer("kefu.example", {"alice": "s3cret"}, SECRET, opaque="op")
    challenge = server.challenge(100.0, alg)
    auth = answer_challenge(challenge, "INVITE", "sip:bob@kefu.example", "alice", "s3cret", "cn", 1)
    result = server.verify("INVITE", auth, 110.0, request_uri="sip:bob@kefu.example")
    assert result.ok, result.reason
    assert result.username == "alice"


def test_server_rejects_wrong_password_method_and_uri() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = server.challenge(0.0)
    bad = answer_challenge(ch, "REGISTER", "sip:r", "alice", "wrong", "c", 1)
    assert server.verify("REGISTER", bad, 1.0).reason == "wrong response"
    good = answer_challenge(ch, "REGISTER", "sip:r", "alice", "pw", "c", 1)
    assert not server.verify("INVITE", good, 1.0).ok
    assert not server.verify("REGISTER", good, 1.0, request_uri="sip:other").ok
    assert server.verify("REGISTER", good, 1.0).ok
    unknown = answer_challenge(ch, "REGISTER", "sip:r", "mallory", "pw", "c", 1)
    assert server.verify("REGISTER", unknown, 1.0).reason == "unknown user"


def test_server_stale_nonce_after_expiry() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET, nonce_lifetime=30.0)
    auth = answer_challenge(server.challenge(1000.0), "BYE", "sip:x", "alice", "pw", "c", 1)
    assert server.verify("BYE", auth, 1029.0).ok
    res = server.verify("BYE", auth, 1031.0)
    assert not res.ok and res.stale
    # A stale=true re-challenge carries a fresh nonce that works.
    ch = DigestChallenge.parse(server.challenge(1031.0, stale=True))
    assert ch.stale
    auth2 = answer_challenge(str(ch), "BYE", "sip:x", "alice", "pw", "c", 2)
    assert server.verify("BYE", auth2, 1032.0).ok


def test_server_rejects_forged_nonce_and_other_secret() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    other = DigestServer("r", {"alice": "pw"}, b"another-secret-of-16+bytes")
    auth = answer_challenge(other.challenge(0.0), "INVITE", "sip:x", "alice", "pw", "c", 1)
    assert server.verify("INVITE", auth, 0.0).reason == "nonce not issued by us"
    forged = 'Digest realm="r", nonce="AAAA", uri="sip:x", username="alice", response="00"'
    assert not server.verify("INVITE", forged, 0.0).ok


def test_server_never_raises_on_garbage() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    for junk in ["", "Digest", 'Digest username="a"', "Basic Zm9vOmJhcg==", "Digest nc=zz"]:
        assert not server.verify("INVITE", junk, 0.0).ok


def test_rfc2069_mode_without_qop() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = server.challenge(0.0, "MD5", qop=())
    auth = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "ignored", 1)
    assert "qop" not in auth and "cnonce" not in auth
    assert server.verify("INVITE", auth, 0.0).ok


def test_auth_int_covers_body() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = server.challenge(0.0, qop=("auth-int",))
    auth = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "c", 1, body=b"v=0\r\n")
    assert server.verify("INVITE", auth, 0.0, body=b"v=0\r\n").ok
    assert not server.verify("INVITE", auth, 0.0, body=b"v=1\r\n").ok


def test_userhash() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = DigestChallenge.parse(server.challenge(0.0))
    ch_uh = DigestChallenge(ch.realm, ch.nonce, ch.algorithm, ch.qop, userhash=True)
    auth = answer_challenge(str(ch_uh), "INVITE", "sip:x", "alice", "pw", "c", 1)
    assert "alice" not in auth
    assert server.verify("INVITE", auth, 0.0).username == "alice"


def test_short_secret_refused() -> None:
    with pytest.raises(ValueError):
        DigestServer("r", {}, b"short")


# --- replay protection (RFC 7616 §3.4/§5.2, RFC 3261 §22.4) ---------------------------------


def _answer(server: DigestServer, uri: str = "sip:x", nc: int = 1, **kw: object) -> str:
    return answer_challenge(server.challenge(0.0, **kw), "INVITE", uri, "alice", "pw", "c", nc)  # type: ignore[arg-type]


def test_nonce_count_must_strictly_increase() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = server.challenge(0.0)
    first = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "c", 1)
    assert server.verify("INVITE", first, 1.0, request_uri="sip:x").ok
    replay = server.verify("INVITE", first, 2.0, request_uri="sip:x")
    assert not replay.ok and replay.stale and replay.reason == "nonce count replayed"
    third = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "c", 3)
    assert server.verify("INVITE", third, 3.0, request_uri="sip:x").ok
    second = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "other-cnonce", 2)
    assert not server.verify("INVITE", second, 4.0, request_uri="sip:x").ok  # below 3


def test_failed_attempts_do_not_consume_the_nonce_count() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    ch = server.challenge(0.0)
    wrong = answer_challenge(ch, "INVITE", "sip:x", "alice", "bad", "c", 9)
    assert not server.verify("INVITE", wrong, 1.0).ok
    good = answer_challenge(ch, "INVITE", "sip:x", "alice", "pw", "c", 1)
    assert server.verify("INVITE", good, 1.0).ok


def test_without_qop_a_nonce_is_good_once() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    auth = _answer(server, qop=())
    assert server.verify("INVITE", auth, 1.0).ok
    again = server.verify("INVITE", auth, 1.0)
    assert not again.ok and again.stale


@pytest.mark.parametrize(
    ("digest_uri", "request_uri", "same"),
    [
        ("sip:bob@kefu.example", "sip:bob@kefu.example", True),
        ("sip:bob@KEFU.Example", "sip:bob@kefu.example", True),
        ("sip:%62ob@kefu.example", "sip:bob@kefu.example", True),
        ("sip:bob@kefu.example;transport=UDP", "sip:bob@kefu.example;transport=udp", True),
        ("sip:bob@kefu.example;foo=1", "sip:bob@kefu.example", True),  # only in one: ignored
        ("sip:BOB@kefu.example", "sip:bob@kefu.example", False),  # userinfo is case-sensitive
        ("sip:bob@kefu.example:5060", "sip:bob@kefu.example", False),
        ("sips:bob@kefu.example", "sip:bob@kefu.example", False),
        ("sip:bob@kefu.example;user=phone", "sip:bob@kefu.example", False),
        ("sip:bob@kefu.example;maddr=1.2.3.4", "sip:bob@kefu.example", False),
        ("sip:alice@kefu.example", "sip:bob@kefu.example", False),
        ("sip:bob@other.example", "sip:bob@kefu.example", False),
        ("*", "sip:bob@kefu.example", False),
        # SIPp 3.6 sends the Request-URI without its user part: same host, port and params.
        ("sip:kefu.example:5070", "sip:service@kefu.example:5070", True),
        ("sip:kefu.example", "sip:service@kefu.example:5070", False),
        ("sip:other.example:5070", "sip:service@kefu.example:5070", False),
        ("sip:kefu.example:5070;maddr=1.2.3.4", "sip:service@kefu.example:5070", False),
    ],
)
def test_uri_directive_must_name_the_request_uri(
    digest_uri: str, request_uri: str, same: bool
) -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET)
    auth = _answer(server, uri=digest_uri)
    result = server.verify("INVITE", auth, 1.0, request_uri=SipUri.parse(request_uri))
    assert result.ok is same, result.reason
    if not same:
        assert result.reason == "uri does not match Request-URI"


def test_nonce_memory_is_bounded_and_evicted_nonces_are_stale() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET, max_nonces=8)
    first = _answer(server)
    for i in range(100):
        server.challenge(float(i))
    assert server.nonces_held == 8
    result = server.verify("INVITE", first, 100.0)
    assert not result.ok and result.stale


def test_expired_nonces_are_forgotten() -> None:
    server = DigestServer("r", {"alice": "pw"}, SECRET, nonce_lifetime=30.0)
    for i in range(10):
        server.challenge(float(i))
    server.challenge(100.0)
    assert server.nonces_held == 1


def test_genuine_nonce_from_a_restarted_node_is_stale_not_forged() -> None:
    before = DigestServer("r", {"alice": "pw"}, SECRET)
    after = DigestServer("r", {"alice": "pw"}, SECRET)
    result = after.verify("INVITE", _answer(before), 1.0)
    assert not result.ok and result.stale

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

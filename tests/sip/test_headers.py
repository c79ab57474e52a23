"""Header value objects: SipUri, NameAddr, Via, CSeq and the list splitter."""

from __future__ import annotations

import pytest

from kefu.errors import SipParseError
from kefu.sip.headers import CSeq, NameAddr, SipUri, Via, split_list

# --- split_list ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("INVITE, ACK,BYE", ["INVITE", "ACK", "BYE"]),
        ("  one  ", ["one"]),
        ("", []),
        (" , ,a,, ", ["a"]),
        ('"Doe, John" <sip:j@x>, <sip:k@y>', ['"Doe, John" <sip:j@x>', "<sip:k@y>"]),
        ("<sip:a@x?h=1,2>, <sip:b@y>", ["<sip:a@x?h=1,2>", "<sip:b@y>"]),
        ('"esc \\" , still quoted" <sip:a@x>', ['"esc \\" , still quoted" <sip:a@x>']),
        ('"unbalanced, a, b', ['"unbalanced, a, b']),
    ],
)
def test_split_list(value: str, expected: list[str]) -> None:
    assert split_list(value) == expected


# --- SipUri ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "sip:alice@atlanta.example.com",
        "sips:alice:secret@atlanta.example.com:5061;transport=tcp;lr",
        "sip:192.0.2.1:5070",
        "sip:[2001:db8::10]:5070;maddr=[2001:db8::1]",
        "sip:user;par=u%40example.net@example.com",
        "sip:%75se%72@example.com",
        "sip:bob@b.example;method=REGISTER?to=sip:a%40b&x=1",
        "sip:queue@127.0.0.1:5080;unknown-no-value;Other=Value",
        "tel:+1-201-555-0123;phone-context=example.com",
        "nobodyknowsthisscheme:totallyopaquecontent",
        "soap.beep://192.0.2.103:3002",
    ],
)
def test_uri_round_trip(text: str) -> None:
    assert str(SipUri.parse(text)) == text


def test_uri_fields() -> None:
    uri = SipUri.parse("sips:alice:secret@Atlanta.example.com:5061;Transport=TCP;lr?h=v")
    assert uri.scheme == "sips"
    assert (uri.user, uri.password, uri.host, uri.port) == (
        "alice",
        "secret",
        "Atlanta.example.com",
        5061,
    )
    assert uri.params == (("Transport", "TCP"), ("lr", None))
    assert uri.transport == "tcp"
    assert uri.lr and uri.has_param("LR") and uri.param("lr") is None
    assert uri.headers == (("h", "v"),)
    assert uri.default_port == 5061
    assert uri.without_headers().headers == ()


def test_uri_scheme_is_case_insensitive_and_kept_lower() -> None:
    uri = SipUri.parse("SIP:bob@example.com")
    assert uri.scheme == "sip"
    assert uri.is_sip
    assert str(uri) == "sip:bob@example.com"


def test_uri_ipv6_host_keeps_brackets() -> None:
    uri = SipUri.parse("sip:caller@[2001:db8::9:1]")
    assert uri.host == "[2001:db8::9:1]"
    assert uri.bare_host == "2001:db8::9:1"
    assert uri.port is None
    # RFC 5118 §4.3: the ":5070" is inside the brackets, part of the address.
    ambiguous = SipUri.parse("sip:[2001:db8::10:5070]")
    assert ambiguous.host == "[2001:db8::10:5070]" and ambiguous.port is None


def test_uri_password_and_odd_user_characters() -> None:
    # RFC 4475 intmeth: the first ':' in userinfo separates the password.
    uri = SipUri.parse(
        "sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too."
        "(doesn't-it)@example.com"
    )
    assert uri.user == "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*"
    assert uri.password == "&it+has=1,weird!*pas$wo~d_too.(doesn't-it)"
    assert uri.host == "example.com"


def test_uri_escapes_are_preserved_and_decodable() -> None:
    uri = SipUri.parse("sip:sips%3Auser%40example.com@example.net")
    assert uri.user == "sips%3Auser%40example.com"
    assert uri.unescaped_user() == "sips:user@example.com"
    assert SipUri.parse("sip:null-%00-null@example.com").unescaped_user() == "null-\x00-null"


def test_uri_tel_and_opaque() -> None:
    tel = SipUri.parse("tel:+19725552222;ext=12")
    assert (tel.scheme, tel.user, tel.host) == ("tel", "+19725552222", "")
    assert tel.param("ext") == "12"
    opaque = SipUri.parse("isbn:2983792873")
    assert opaque.scheme == "isbn" and opaque.opaque == "2983792873"
    assert not opaque.is_sip


def test_uri_param_editing() -> None:
    uri = SipUri.parse("sip:a@b;transport=udp;lr")
    assert str(uri.with_param("Transport", "tcp")) == "sip:a@b;transport=tcp;lr"
    assert str(uri.with_params(maddr="192.0.2.1", ob=None)) == (
        "sip:a@b;transport=udp;lr;maddr=192.0.2.1;ob"
    )
    assert str(uri.without_param("LR")) == "sip:a@b;transport=udp"
    assert str(SipUri(host="example.com", user="bob", port=5080)) == "sip:bob@example.com:5080"


@pytest.mark.parametrize(
    "text",
    [
        "<sip:user@example.com>",
        "user@example.com",
        "sip:",
        "sip:user@example.com; lr",
        "sip:2001:db8::10",
        "sip:[2001:db8::10",
        "sip:[not-an-address]",
        "sip:@example.com",
        "sip:host:99999",
        "sip:host:",
        "sip:bad host",
        "sip:a@b;=x",
        "sip:a@b;x=",
        "sip:a@b?noequals",
        "tel:",
    ],
)
def test_uri_rejects(text: str) -> None:
    with pytest.raises(SipParseError):
        SipUri.parse(text)


# --- NameAddr --------------------------------------------------------------------------


def test_name_addr_quoted_display_with_escapes() -> None:
    na = NameAddr.parse('"J Rosenberg \\\\\\""       <sip:jdrosen@example.com> ; tag = 98asjd8')
    assert na.display_name == 'J Rosenberg \\"'
    assert na.uri.user == "jdrosen"
    assert na.tag == "98asjd8"
    assert str(na) == '"J Rosenberg \\\\\\"" <sip:jdrosen@example.com>;tag=98asjd8'
    assert NameAddr.parse(str(na)) == na


def test_name_addr_unquoted_display_without_space() -> None:
    na = NameAddr.parse("caller<sip:caller@example.com>;tag=323")
    assert na.display_name == "caller"
    assert na.tag == "323"


def test_name_addr_token_display_words() -> None:
    na = NameAddr.parse("token1~` token2'+_ token3*%!.- <sip:mundane@example.com>;p=1")
    assert na.display_name == "token1~` token2'+_ token3*%!.-"
    assert na.param("P") == "1"


def test_name_addr_addr_spec_params_belong_to_header() -> None:
    # RFC 4475 cparam01 vs cparam02.
    bare = NameAddr.parse("sip:+19725552222@gw1.example.net;unknownparam")
    assert bare.uri.params == ()
    assert bare.has_param("unknownparam")
    bracketed = NameAddr.parse("<sip:+19725552222@gw1.example.net;unknownparam>")
    assert bracketed.uri.has_param("unknownparam")
    assert bracketed.params == ()


def test_name_addr_keeps_uri_headers_inside_brackets() -> None:
    na = NameAddr.parse("<sip:user@example.com?Route=%3Csip:sip.example.com%3E>")
    assert na.uri.headers == (("Route", "%3Csip:sip.example.com%3E"),)


def test_name_addr_with_tag_and_params() -> None:
    na = NameAddr.parse("<sip:bob@b.example>")
    assert na.tag is None
    tagged = na.with_tag("abc")
    assert tagged.tag == "abc" and str(tagged) == "<sip:bob@b.example>;tag=abc"
    assert tagged.with_tag("def").params == (("tag", "def"),)
    assert str(NameAddr(SipUri(user="a", host="x"), "Alice A.")) == '"Alice A." <sip:a@x>'


@pytest.mark.parametrize(
    "text",
    [
        '"Mr. J. User <sip:j.user@example.com>',
        '"Watson, Thomas" < sip:t.watson@example.org >',
        "Bell, Alexander <sip:a.g.bell@example.com>;tag=43",
        "sip:user@example.com?Route=%3Csip:sip.example.com%3E",
        '"Joe" <sip:joe@example.org>;;;;',
        '"Joe" sip:joe@example.org',
        "<sip:joe@example.org",
        "<sip:joe@example.org> junk",
        "",
    ],
)
def test_name_addr_rejects(text: str) -> None:
    with pytest.raises(SipParseError):
        NameAddr.parse(text)


# --- Via -------------------------------------------------------------------------------


def test_via_with_lws_everywhere() -> None:
    via = Via.parse("SIP  /   2.0 /UDP    192.0.2.2;branch=390skdjuw")
    assert (via.protocol, via.transport, via.host, via.port) == (
        "SIP/2.0",
        "UDP",
        "192.0.2.2",
        None,
    )
    assert via.branch == "390skdjuw"
    spaced = Via.parse("SIP  / 2.0  / TCP     spindle.example.com   ;  branch  =   z9hG4bK9ikj8")
    assert spaced.host == "spindle.example.com" and spaced.branch == "z9hG4bK9ikj8"
    assert str(spaced) == "SIP/2.0/TCP spindle.example.com;branch=z9hG4bK9ikj8"


def test_via_ipv6_port_and_params() -> None:
    via = Via.parse("SIP/2.0/UDP [2001:db8::9:1]:6050;branch=z9hG4bKas3-111;rport;ttl=16")
    assert via.host == "[2001:db8::9:1]" and via.port == 6050
    assert via.sent_by == ("[2001:db8::9:1]", 6050)
    assert via.rport_requested and via.rport is None
    assert via.ttl == 16
    assert via.has_rfc3261_branch


@pytest.mark.parametrize(
    "received", ["2001:db8::9:255", "[2001:db8::9:255]", "192.0.2.200", "::ffff:192.0.2.2"]
)
def test_via_received_with_and_without_brackets(received: str) -> None:
    via = Via.parse(f"SIP/2.0/UDP [2001:db8::9:1];received={received};branch=z9hG4bKas3")
    assert via.received == received


def test_via_sent_by_default_ports() -> None:
    assert Via.parse("SIP/2.0/UDP a.example").sent_by == ("a.example", 5060)
    assert Via.parse("SIP/2.0/TLS a.example").sent_by == ("a.example", 5061)
    assert Via.parse("SIP/2.0/UDP a.example : 5070").sent_by == ("a.example", 5070)


def test_via_bare_magic_cookie_is_not_an_rfc3261_branch() -> None:
    assert not Via.parse("SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK").has_rfc3261_branch
    assert not Via.parse("SIP/2.0/UDP 192.0.2.1;branch=1234").has_rfc3261_branch
    assert not Via.parse("SIP/2.0/UDP 192.0.2.1").has_rfc3261_branch


def test_via_with_received_rfc3261() -> None:
    via = Via.parse("SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776")
    stamped = via.with_received("192.0.2.4", 5060)
    assert str(stamped) == "SIP/2.0/UDP pc33.example.com;branch=z9hG4bK776;received=192.0.2.4"
    # Same address as sent-by: nothing to add (RFC 3261 §18.2.1).
    same = Via.parse("SIP/2.0/UDP 192.0.2.4:5060;branch=z9hG4bK1")
    assert same.with_received("192.0.2.4", 5060) is same


def test_via_with_received_rfc3581_rport() -> None:
    via = Via.parse("SIP/2.0/UDP 10.0.0.1:5060;rport;branch=z9hG4bKa")
    stamped = via.with_received("192.0.2.9", 40123)
    assert (
        str(stamped) == "SIP/2.0/UDP 10.0.0.1:5060;rport=40123;branch=z9hG4bKa;received=192.0.2.9"
    )
    assert stamped.rport == 40123 and stamped.received == "192.0.2.9"
    # rport forces received even when the host matches (RFC 3581 §4).
    same_host = Via.parse("SIP/2.0/UDP 192.0.2.9;rport").with_received("192.0.2.9", 5999)
    assert same_host.received == "192.0.2.9" and same_host.rport == 5999
    v6 = Via.parse("SIP/2.0/UDP [2001:db8::1];rport").with_received("[2001:db8::2]", 7)
    assert v6.received == "2001:db8::2"


@pytest.mark.parametrize(
    "text",
    [
        "SIP/2.0/UDP 192.0.2.15;;",
        "SIP/2.0/UDP",
        "SIP/2.0 192.0.2.15",
        "SIP/2.0/UDP host:port",
        "SIP/2.0/UDP host;ttl=300",
        "SIP/2.0/UDP host;received=not-an-ip",
        "SIP/2.0/UDP host;rport=abc",
        "SIP/2.0/UDP host;branch",
        "SIP/2.0/UDP [2001:db8::1",
        "SIP/2.0/UDP host junk",
    ],
)
def test_via_rejects(text: str) -> None:
    with pytest.raises(SipParseError):
        Via.parse(text)


# --- CSeq ------------------------------------------------------------------------------


def test_cseq() -> None:
    assert CSeq.parse("0009 INVITE") == CSeq(9, "INVITE")
    assert CSeq.parse("  2147483647\t  BYE ") == CSeq(2**31 - 1, "BYE")
    assert str(CSeq(1, "REGISTER")) == "1 REGISTER"


@pytest.mark.parametrize(
    "text",
    ["2147483648 INVITE", "36893488147419103232 REGISTER", "-1 INVITE", "1", "x INVITE", "1 A B"],
)
def test_cseq_rejects(text: str) -> None:
    with pytest.raises(SipParseError):
        CSeq.parse(text)


def test_cseq_constructor_checks_range() -> None:
    with pytest.raises(SipParseError):
        CSeq(2**31, "INVITE")

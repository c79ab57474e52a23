"""Hostile input at the signaling edge: every field of every client message with the wrong
JSON type, out-of-range numbers, nesting, lone surrogates and oversized strings; tokens with
wrong-typed claims or hostile headers. Each must end in its documented error code
(docs/signaling.md), never in an unhandled exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from signaling.fakes import SECRET, FakeSocket, msg, settle, token

from kefu.signaling import protocol as p
from kefu.signaling.auth import MAX_TOKEN_CHARS, Authenticator
from kefu.signaling.errors import AuthError, ProtocolError
from kefu.signaling.hub import SignalingHub
from kefu.signaling.settings import SignalingSettings

# --- messages ------------------------------------------------------------------------------

# JSON texts that are a wrong type (or an impossible value) for a string field.
NOT_A_STRING = {
    "int": "5",
    "negative": "-1",
    "huge_int": "1" + "0" * 300,
    "float": "1.5",
    "nan": "NaN",
    "infinity": "Infinity",
    "minus_infinity": "-Infinity",
    "overflowing_float": "1e400",
    "true": "true",
    "null": "null",
    "object": "{}",
    "nested_object": '{"a":[{"b":{"c":[]}}]}',
    "list": '["x"]',
    "nested_list": "[" * 500 + "]" * 500,
}
# Strings that are JSON, but not text a frame could carry on: lone UTF-16 surrogates.
LONE_SURROGATES = {"high": '"\\ud800"', "low": '"x\\udfff"'}

# Every client message type with a valid body, and the fields that must be strings.
VALID: dict[str, dict[str, Any]] = {
    "join": {"room": "r1", "display": "Alice"},
    "offer": {"sdp": "v=0"},
    "answer": {"sdp": "v=0"},
    "resume": {"session": "s1", "token": "t"},
    "candidate": {"candidate": {"candidate": "candidate:1", "sdpMid": "0", "sdpMLineIndex": 0}},
    "leave": {},
    "ping": {},
}
STRING_FIELDS = [
    ("join", "room"),
    ("join", "display"),
    ("offer", "sdp"),
    ("answer", "sdp"),
    ("resume", "session"),
    ("resume", "token"),
]


def _with(kind: str, field: str, json_value: str) -> str:
    """The valid ``kind`` message with ``field`` replaced by raw JSON text."""
    body = {"v": 1, "type": kind, **VALID[kind], field: "@@"}
    return json.dumps(body).replace('"@@"', json_value)


def _with_candidate(field: str, json_value: str) -> str:
    inner = {**VALID["candidate"]["candidate"], field: "@@"}
    return json.dumps({"v": 1, "type": "candidate", "candidate": inner}).replace('"@@"', json_value)


def _cases() -> list[tuple[str, str, str]]:
    cases: list[tuple[str, str, str]] = []
    for kind, field in STRING_FIELDS:
        for name, value in {**NOT_A_STRING, **LONE_SURROGATES}.items():
            cases.append((f"{kind}.{field}={name}", _with(kind, field, value), "bad_message"))
    # The candidate object itself, and each of its fields.
    for name, value in NOT_A_STRING.items():
        if name != "null":  # null is "end of candidates"
            cases.append((f"candidate={name}", _with("candidate", "candidate", value), ""))
    for name, value in {**NOT_A_STRING, **LONE_SURROGATES}.items():
        cases.append((f"candidate.candidate={name}", _with_candidate("candidate", value), ""))
        if name != "null":  # sdpMid may be null when sdpMLineIndex is given
            cases.append((f"candidate.sdpMid={name}", _with_candidate("sdpMid", value), ""))
    for name, value in {
        **NOT_A_STRING,
        "string": '"0"',
        "huge": str(2**64),
        "too_big": "65536",
        "negative": "-1",
    }.items():
        if name not in ("null", "int"):  # null and 5 are fine for sdpMLineIndex
            cases.append(
                (f"candidate.sdpMLineIndex={name}", _with_candidate("sdpMLineIndex", value), "")
            )
    # The envelope: v and type.
    for name, value in {**NOT_A_STRING, "two": "2", "string": '"1"'}.items():
        body = '{"v":@@,"type":"ping"}'.replace("@@", value)
        cases.append((f"v={name}", body, "bad_message"))
    for name, value in NOT_A_STRING.items():
        cases.append((f"type={name}", '{"v":1,"type":@@}'.replace("@@", value), "bad_message"))
    cases += [
        ("type=unknown", '{"v":1,"type":"x"}', "unknown_type"),
        ("type=long_unknown", json.dumps({"v": 1, "type": "x" * 60_000}), "unknown_type"),
        ("type=surrogate", '{"v":1,"type":"\\ud800"}', "unknown_type"),
        ("type=server_only", json.dumps({"v": 1, "type": "bye", "reason": "x"}), "unknown_type"),
        # Oversized strings: each field's own limit, then the message limit.
        ("join.room=129", json.dumps({"v": 1, "type": "join", "room": "r" * 129}), "bad_message"),
        ("join.display=65", _with("join", "display", json.dumps("d" * 65)), "bad_message"),
        ("resume.session=129", _with("resume", "session", json.dumps("s" * 129)), "bad_message"),
        ("resume.token=8193", _with("resume", "token", json.dumps("t" * 8193)), "bad_message"),
        ("offer.sdp=64KiB", _with("offer", "sdp", json.dumps("v" * 70_000)), "too_large"),
        # Not JSON objects, or JSON nested beyond what the decoder will follow.
        ("nested_list_50000", "[" * 50_000, "bad_json"),
        ("nested_object_10000", '{"a":' * 10_000 + "1" + "}" * 10_000, "bad_json"),
        ("nested_in_field", '{"v":1,"type":"join","room":' + "[" * 30_000, "bad_json"),
        ("int_over_4300_digits", '{"v":1,"type":"ping","x":' + "9" * 5000 + "}", "bad_json"),
        ("list", "[]", "bad_json"),
        ("number", "5", "bad_json"),
        ("null", "null", "bad_json"),
        ("empty", "", "bad_json"),
        ("utf8_bom", "\ufeff{}", "bad_json"),
    ]
    return [(i, t, c or "bad_message") for i, t, c in cases]


CASES = _cases()


@pytest.mark.parametrize(("text", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_message_gets_its_documented_code(text: str, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        p.parse_client(text)
    assert info.value.code == code
    assert len(str(info.value)) < 200  # the error never echoes the hostile input back


def test_the_table_covers_every_client_message_type() -> None:
    kinds = {case[0].split(".")[0].split("=")[0] for case in CASES}
    assert {"join", "offer", "answer", "resume", "candidate"} <= kinds
    assert set(VALID) == set(p._CLIENT)  # a new message type needs rows here
    for kind in VALID:  # and the valid bodies really are valid
        p.parse_client(json.dumps({"v": 1, "type": kind, **VALID[kind]}))


@pytest.mark.parametrize("field", ["room", "display"])
async def test_a_lone_surrogate_name_never_reaches_the_other_participants(
    make_hub: Callable[..., SignalingHub], settings: SignalingSettings, field: str
) -> None:
    """A ``\\ud800`` display name would be broadcast to everyone in the room, whose sockets
    cannot encode it; the join is refused with bad_message and nobody else is touched."""
    hub = make_hub(settings)
    other_sock = FakeSocket()
    other = await hub.open(other_sock, "10.0.0.2", token("bob", "admin"))
    assert other is not None
    await hub.receive(other, msg("join", room="r1"))
    sock = FakeSocket()
    conn = await hub.open(sock, "10.0.0.1", token("eve", "admin"))
    assert conn is not None
    body = {"room": "r1", "display": "Eve", field: "@@"}
    await hub.receive(conn, msg("join", **body).replace('"@@"', '"\\ud800"'))
    await settle()
    assert sock.of("error") == [
        {"v": 1, "type": "error", "code": "bad_message", "message": sock.of("error")[0]["message"]}
    ]
    assert sock.closed is None and hub.session_count == 1
    assert other_sock.types() == ["joined"]
    await hub.receive(conn, msg("ping"))  # the socket still serves
    await settle()
    assert sock.types() == ["error", "pong"]


# --- tokens --------------------------------------------------------------------------------

AUTH = Authenticator(secret=SECRET)
CLAIMS = {"sub": "alice", "role": "agent", "exp": 2**40}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: bytes, payload: bytes) -> str:
    """A correctly HS256-signed token around arbitrary header and payload bytes (jwt.encode
    only takes dicts, and would not write nesting a decoder cannot follow)."""
    signing = f"{_b64(header)}.{_b64(payload)}"
    mac = hmac.new(SECRET.encode(), signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(mac)}"


def _claims(**changes: Any) -> str:
    return jwt.encode({**CLAIMS, **changes}, SECRET, algorithm="HS256")


def _raw_claims(json_text: str) -> str:
    return _forged(b'{"alg":"HS256","typ":"JWT"}', json_text.encode())


HOSTILE_TOKENS = {
    # The reported attack: a string exp (PyJWT accepts "9999999999" as a number).
    "exp_string": _claims(exp=str(2**40)),
    "exp_list": _claims(exp=[2**40]),
    "exp_object": _claims(exp={"n": 1}),
    "exp_huge_int": _claims(exp=10**400),
    "exp_nan": _raw_claims('{"sub":"a","role":"agent","exp":NaN}'),
    "exp_infinity": _raw_claims('{"sub":"a","role":"agent","exp":Infinity}'),
    "exp_null": _claims(exp=None),
    "iat_string": _claims(iat="1700000000"),
    "iat_list": _claims(iat=[]),
    "iat_huge": _claims(iat=10**400),
    "nbf_string": _claims(nbf="0"),
    "nbf_object": _claims(nbf={}),
    "sub_int": _claims(sub=5),
    "sub_list": _claims(sub=["alice"]),
    "sub_empty": _claims(sub=""),
    "sub_huge": _claims(sub="a" * 300),
    "sub_surrogate": _raw_claims('{"sub":"\\ud800","role":"agent","exp":1099511627776}'),
    "role_list": _claims(role=["agent"]),
    "role_object": _claims(role={"agent": 1}),
    "role_int": _claims(role=1),
    "room_int": _claims(room=7),
    "room_list": _claims(room=["r1"]),
    "room_empty": _claims(room=""),
    "room_newline": _claims(room="a\nb"),
    "room_huge": _claims(room="r" * 129),
    "payload_list": _raw_claims("[1]"),
    "payload_nested": _raw_claims("[" * 3000),
    "header_nested": _forged(b"[" * 3000, json.dumps(CLAIMS).encode()),
    "header_list": _forged(b'["HS256"]', json.dumps(CLAIMS).encode()),
    "header_not_utf8": _forged(b'{"alg":"\xff"}', json.dumps(CLAIMS).encode()),
    "alg_none": jwt.encode(CLAIMS, None, algorithm="none"),
    "alg_none_signed": _forged(b'{"alg":"none"}', json.dumps(CLAIMS).encode()),
    "alg_list": _forged(b'{"alg":["HS256"]}', json.dumps(CLAIMS).encode()),
    "alg_object": _forged(b'{"alg":{"HS256":1}}', json.dumps(CLAIMS).encode()),
    "huge_header": _forged(
        json.dumps({"alg": "HS256", "pad": "x" * MAX_TOKEN_CHARS}).encode(),
        json.dumps(CLAIMS).encode(),
    ),
    "four_segments": _claims() + ".x",
    "bad_base64": "e30.e30.%%%",
}


@pytest.mark.parametrize("tok", list(HOSTILE_TOKENS.values()), ids=list(HOSTILE_TOKENS))
async def test_hostile_token_is_bad_token(tok: str) -> None:
    with pytest.raises(AuthError) as info:
        await AUTH.verify(tok)
    assert (info.value.code, info.value.close_code) == ("bad_token", 4401), info.value
    with pytest.raises(AuthError) as info:
        AUTH.verify_hs256(tok)
    assert (info.value.code, info.value.close_code) == ("bad_token", 4401), info.value


async def test_hostile_tokens_are_refused_at_the_door_with_4401(
    make_hub: Callable[..., SignalingHub], settings: SignalingSettings
) -> None:
    hub = make_hub(settings)
    for i, (name, tok) in enumerate(HOSTILE_TOKENS.items()):
        sock = FakeSocket()
        assert await hub.open(sock, f"10.1.{i}.1", tok) is None, name
        assert sock.closed == (4401, "bad_token"), name
        assert [m["code"] for m in sock.of("error")] == ["bad_token"], name


async def test_well_typed_claims_still_pass() -> None:
    claims = await AUTH.verify(_claims(iat=1_700_000_000, nbf=1_700_000_000.5, room="r 1"))
    assert (claims.user, claims.role, claims.room, claims.expires) == (
        "alice",
        "agent",
        "r 1",
        float(2**40),
    )

"""Protocol v1: golden files round-trip, and every kind of bad input gets its stable code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kefu.signaling import protocol as p
from kefu.signaling.errors import ProtocolError

GOLDEN = Path(__file__).parent / "golden"


def _files(direction: str) -> list[Path]:
    return sorted((GOLDEN / direction).glob("*.json"))


@pytest.mark.parametrize("path", _files("client"), ids=lambda f: f.stem)
def test_client_golden_round_trip(path: Path) -> None:
    text = path.read_text()
    message = p.parse_client(text)
    assert message.TYPE == path.stem.removesuffix("_end")
    assert json.loads(p.serialize(message)) == json.loads(text)


@pytest.mark.parametrize("path", _files("server"), ids=lambda f: f.stem)
def test_server_golden_round_trip(path: Path) -> None:
    text = path.read_text()
    message = p.parse_server(text)
    assert message.TYPE == path.stem.removesuffix("_end")
    assert json.loads(p.serialize(message)) == json.loads(text)


def test_every_message_type_has_a_golden_file() -> None:
    client = {f.stem.removesuffix("_end") for f in _files("client")}
    server = {f.stem.removesuffix("_end") for f in _files("server")}
    assert client == {"join", "offer", "answer", "candidate", "leave", "ping", "resume"}
    assert server == {
        "joined",
        "answer",
        "offer",
        "candidate",
        "participant_joined",
        "participant_left",
        "event",
        "pong",
        "error",
        "bye",
    }


def test_parsed_values() -> None:
    join = p.parse_client((GOLDEN / "client" / "join.json").read_text())
    assert join == p.Join("support-42", "Alice")
    end = p.parse_client('{"v":1,"type":"candidate","candidate":null}')
    assert end == p.Candidate(None)
    cand = p.parse_client((GOLDEN / "client" / "candidate.json").read_text())
    assert isinstance(cand, p.Candidate) and cand.candidate is not None
    assert cand.candidate.sdp_mid == "0" and cand.candidate.sdp_mline_index == 0
    # display is optional; unknown extra fields are ignored
    assert p.parse_client('{"v":1,"type":"join","room":"r","x":1}') == p.Join("r", "")


def test_serialize_is_compact_and_versioned() -> None:
    assert p.serialize(p.Ping()) == '{"v":1,"type":"ping"}'
    assert p.serialize(p.Error("too_large", "x")) == (
        '{"v":1,"type":"error","code":"too_large","message":"x"}'
    )


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{not json", "bad_json"),
        ("[1, 2]", "bad_json"),
        ('"ping"', "bad_json"),
        ("", "bad_json"),
        ('{"v":1,"type":"dance"}', "unknown_type"),
        ('{"v":1,"type":"joined","session":"s"}', "unknown_type"),  # server-only type
        ('{"v":1}', "bad_message"),
        ('{"type":"ping"}', "bad_message"),
        ('{"v":2,"type":"ping"}', "bad_message"),
        ('{"v":true,"type":"ping"}', "bad_message"),
        ('{"v":1,"type":"join"}', "bad_message"),
        ('{"v":1,"type":"join","room":""}', "bad_message"),
        ('{"v":1,"type":"join","room":"a\\nb"}', "bad_message"),
        ('{"v":1,"type":"join","room":"r","display":' + json.dumps("x" * 65) + "}", "bad_message"),
        ('{"v":1,"type":"offer"}', "bad_message"),
        ('{"v":1,"type":"offer","sdp":5}', "bad_message"),
        ('{"v":1,"type":"candidate"}', "bad_message"),
        ('{"v":1,"type":"candidate","candidate":"x"}', "bad_message"),
        ('{"v":1,"type":"candidate","candidate":{"candidate":"c"}}', "bad_message"),
        (
            '{"v":1,"type":"candidate","candidate":{"candidate":"c","sdpMLineIndex":true}}',
            "bad_message",
        ),
        ('{"v":1,"type":"resume","session":"s"}', "bad_message"),
    ],
)
def test_bad_input_codes(text: str, code: str) -> None:
    with pytest.raises(ProtocolError) as info:
        p.parse_client(text)
    assert info.value.code == code
    assert isinstance(info.value, ValueError)


def test_too_large() -> None:
    big = json.dumps({"v": 1, "type": "offer", "sdp": "a" * p.MAX_MESSAGE_BYTES})
    with pytest.raises(ProtocolError) as info:
        p.parse_client(big)
    assert info.value.code == "too_large"
    # exactly at the limit is fine
    pad = p.MAX_MESSAGE_BYTES - len(p.serialize(p.Offer("")))
    assert p.parse_client(p.serialize(p.Offer("a" * pad))) == p.Offer("a" * pad)


def test_too_large_counts_utf8_bytes() -> None:
    text = json.dumps({"v": 1, "type": "offer", "sdp": "é" * 40_000}, ensure_ascii=False)
    assert len(text) < p.MAX_MESSAGE_BYTES < len(text.encode())
    with pytest.raises(ProtocolError, match="exceeds"):
        p.parse_client(text)


def test_deeply_nested_json_is_bad_json() -> None:
    with pytest.raises(ProtocolError) as info:
        p.parse_client("[" * 30_000 + "]" * 30_000)
    assert info.value.code == "bad_json"


def test_server_messages_reject_bad_shapes() -> None:
    with pytest.raises(ProtocolError):
        p.parse_server('{"v":1,"type":"event","event":[1]}')
    with pytest.raises(ProtocolError):
        p.parse_server('{"v":1,"type":"participant_joined","participant":{"id":1}}')
    with pytest.raises(ProtocolError):
        p.parse_server(
            '{"v":1,"type":"joined","session":"s","participant":"p","room":"r","ice_servers":"x"}'
        )

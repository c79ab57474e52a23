"""Outbound calls against a real ``kefu serve`` and a real SIPp trunk (UAS), placed with the
real CLI, ``kefu call`` (docs/trunk.md#outbound-calls).

SIPp (loadtest/sipp/uas_digest_answer.xml) challenges kefu's INVITE with a 401, verifies the
digest credentials of the next INVITE itself (``verifyauth``), answers 180 + 200 with SDP,
checks that kefu's ACK has the INVITE's CSeq number and its credentials, then waits for
kefu's BYE. The audio kefu sends is judged on the wire (tshark): it must be the prompt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kefu.signaling.tokens import mint_token
from loadtest.kefu_process import KefuProcess
from loadtest.pcap import speech_like_pcm, write_wav
from loadtest.peers import (
    SippProcess,
    TsharkCapture,
    port_is_bound,
    sipp_media_port,
    start_sipp_uas,
    take_ports,
)
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams
from tests.conftest import start_kefu
from tests.helpers.calls_api import list_calls

pytestmark = [pytest.mark.netns, pytest.mark.peer]

SECRET = "outbound-test-secret-0123456789abcdef"
CALLED = "sip:4001@trunk.example"
"""A host name: only the outbound proxy (SIPp) can route it, kefu resolves no names."""


def trunk_kefu(tmp_path: Path, sipp_port: int, password: str, **env: str) -> KefuProcess:
    return start_kefu(
        tmp_path,
        env={
            "KEFU_AUTH_JWT_SECRET": SECRET,
            "KEFU_TRUNK_OUTBOUND_PROXY": f"127.0.0.1:{sipp_port}",
            "KEFU_TRUNK_USERNAME": "kefu",
            "KEFU_TRUNK_PASSWORD": password,
            **env,
        },
    )


def kefu_call(kefu: KefuProcess, *args: str) -> tuple[int, dict[str, object]]:
    """``kefu call ... --json`` as a user runs it; (exit status, its JSON line)."""
    token = mint_token(SECRET, "maria", "agent", 600.0, None)
    proc = subprocess.run(
        [sys.executable, "-m", "kefu.mediaserver.cli", "call", CALLED, "--server", kefu.http,
         "--token", token, "--json", "--timeout", "20", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def uas(alg: str = "MD5", media_port: int | None = None) -> SippProcess:
    return start_sipp_uas(
        "uas_digest_answer",
        port=take_ports(),
        media_port=media_port,
        rtp_echo=False,
        calls=1,
        variables={"alg": alg},
    )


def test_call_through_a_digest_challenge_plays_the_prompt_then_byes(tmp_path: Path) -> None:
    prompt = speech_like_pcm(2.0, 8000)
    write_wav(tmp_path / "prompt.wav", prompt, 8000)
    media_port = sipp_media_port()
    trunk = uas(media_port=media_port)
    kefu = trunk_kefu(
        tmp_path,
        trunk.port,
        "trunk-secret",
        KEFU_CALLS_PROMPT_WAV=str(tmp_path / "prompt.wav"),
        KEFU_CALLS_MAX_CALL_SECONDS="3",
    )
    try:
        with TsharkCapture(ports=[media_port]) as capture:
            status, out = kefu_call(
                kefu, "--mode", "prompt", "--context", '{"order": "A-1042"}', "--from", "4000"
            )
            assert (status, out["result"]) == (0, "answered"), out
            (listed,) = list_calls(kefu.http, SECRET)
            assert listed["call_id"] == out["call_id"] and listed["state"] == "ai_active"
            assert listed["direction"] == "outbound" and listed["callee"] == CALLED
            assert listed["context"] == {"order": "A-1042"}
            result = trunk.wait(15)  # kefu hangs up after max_call_seconds: SIPp got its BYE
        assert result.ok, result.errors or result.stderr_tail
    finally:
        trunk.stop()
        kefu.stop()
    call_id = out["call_id"]
    retried = kefu.wait_event("outbound_retried")
    assert (retried["call_id"], retried["cause"], retried["status"]) == (call_id, "auth", 401)
    assert kefu.wait_event("outbound_answered")["codec"] == "PCMU"
    ended = kefu.wait_event("call_ended")
    assert (ended["call_id"], ended["reason"]) == (call_id, "max_call_seconds")

    sent = find_stream(rtp_streams(capture.path, ports=[media_port]), dst_port=media_port)
    assert {p.payload_type for p in sent.packets} == {0}
    assert sent.stats().lost == 0
    heard = sent.pcm()
    delay_ms, similarity = echo_delay_and_similarity(prompt, heard)
    # the prompt itself, from its start: G.711 + 8k -> 16k -> 8k resampling keep it close
    assert similarity > 0.8 and delay_ms < 100, (delay_ms, similarity)
    assert np.abs(heard[: len(prompt)].astype(np.int32)).mean() > 500


def test_a_trunk_that_challenges_twice_fails_the_call(tmp_path: Path) -> None:
    trunk = uas()
    kefu = trunk_kefu(tmp_path, trunk.port, "not-the-password")
    try:
        status, out = kefu_call(kefu, "--mode", "echo")
        result = trunk.wait(10)
        assert result.ok, result.errors or result.stderr_tail  # it got the ACK of its 2nd 401
        assert status == 1 and out["result"] == "failed"
        assert (out["sip_status"], out["reason"]) == (
            401,
            "authentication failed: challenged again",
        )
        assert len(kefu.events("outbound_retried")) == 1  # one retry, never a third INVITE
        ended = kefu.wait_event("call_ended")
        assert (ended["call_id"], ended["reason"]) == (out["call_id"], "failed 401")
        assert kefu.metric("kefu_calls_total", 'result="failed"') == 1
        assert kefu.metric("kefu_active_calls") == 0
        port = int(kefu.wait_event("rtp_closed")["rtp_port"])
        assert not port_is_bound(port) and not port_is_bound(port + 1)
    finally:
        trunk.stop()
        kefu.stop()


def test_an_unknown_digest_algorithm_fails_without_a_second_invite(tmp_path: Path) -> None:
    trunk = uas(alg="SHA-999")
    kefu = trunk_kefu(tmp_path, trunk.port, "trunk-secret")
    try:
        status, out = kefu_call(kefu, "--mode", "echo")
        assert status == 1 and out["sip_status"] == 401
        assert "unsupported digest algorithm 'SHA-999'" in str(out["reason"])
        result = trunk.wait(10)  # SIPp saw no second INVITE within 2 s
        assert result.ok, result.errors or result.stderr_tail
        assert not kefu.events("outbound_retried")
    finally:
        trunk.stop()
        kefu.stop()

"""baresip (a real softphone) calls a real ``kefu serve`` over SIP/TLS with SDES-SRTP.

baresip 1.0 dials ``sip:echo@HOST:TLSPORT;transport=tls`` with ``mediaenc=srtp-mand`` (an
``RTP/SAVP`` offer with ``a=crypto`` lines, RFC 4568) and presents a client certificate of the
test CA, which kefu requires (``sip.tls_verify_client``). kefu echoes. What is checked:

* the call came in over TLS and its media is SRTP (kefu's ``rtp_started`` and
  ``GET /api/calls``: ``rtp.srtp`` is the suite);
* the audio went both ways decrypted: baresip's recording of what it heard is its own
  voice (kefu could echo only what it decrypted, baresip records only what it decrypted);
* on the wire (tshark on lo) every audio packet carries the 80-bit auth tag and its payload
  is not the caller's PCMU.

A client certificate kefu does not trust is refused in the handshake. (baresip 1.0 loads
``sip_cafile`` but does not verify kefu's certificate: libre 1.1 never asks OpenSSL to.
kefu's server certificate is verified by Python clients in tests/mediaserver/test_sip_tls_srtp.py.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from loadtest.certs import Pki, make_pki
from loadtest.kefu_process import KefuProcess
from loadtest.pcap import make_speech_wav, read_wav
from loadtest.peers import TsharkCapture, baresip_rtp_ports, start_baresip
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams
from tests.helpers.calls_api import list_calls

pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        not all(shutil.which(b) for b in ("baresip", "tshark"))
        or not Path("/usr/lib/baresip/modules/srtp.so").exists(),
        reason="needs baresip (with its srtp module) and tshark",
    ),
]

SECRET = "baresip-tls-test-secret-0123456789abcdef"
SUITE = "AES_CM_128_HMAC_SHA1_80"
TAG = 10
"""Bytes of SRTP auth tag after each payload with AES_CM_128_HMAC_SHA1_80 (RFC 4568 §6.2.1)."""


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def tls_kefu(kefu_factory, pki: Pki) -> tuple[KefuProcess, str]:  # type: ignore[no-untyped-def]
    """kefu in echo mode with a TLS listener that wants client certificates of the test CA;
    the process and its ``host:port`` for TLS."""
    kefu = kefu_factory(
        "--media-mode",
        "echo",
        env={
            "KEFU_AUTH_JWT_SECRET": SECRET,
            "KEFU_SIP_TLS_LISTEN": "127.0.0.1:0",
            "KEFU_SIP_TLS_CERT": pki.cert("server"),
            "KEFU_SIP_TLS_KEY": pki.key("server"),
            "KEFU_SIP_TLS_CA": pki.cert("ca"),
            "KEFU_SIP_TLS_VERIFY_CLIENT": "1",
        },
    )
    return kefu, str(kefu.wait_event("kefu_started")["sip_tls"])


def test_baresip_calls_over_tls_with_srtp_and_hears_its_echo(
    kefu_factory, pki: Pki, tmp_path: Path
) -> None:
    kefu, tls = tls_kefu(kefu_factory, pki)
    wav = make_speech_wav(tmp_path / "caller.wav", 4.0)
    rtp_lo, rtp_hi = baresip_rtp_ports()
    phone_ports = list(range(rtp_lo, rtp_hi + 2))
    with TsharkCapture(ports=phone_ports) as cap:
        phone = start_baresip(
            f"sip:echo@{tls};transport=tls",
            wav,
            rtp_ports=(rtp_lo, rtp_hi),
            tls_ca=pki.cert("ca"),
            tls_cert=(pki.cert("client"), pki.key("client")),
            mediaenc="srtp-mand",
        )
        with phone:
            started = kefu.wait_event("rtp_started")
            during = [
                c for c in list_calls(kefu.http, SECRET) if c["call_id"] == started["call_id"]
            ]
            assert phone.wait(20) == 0, phone.log
            log = phone.log
            recordings = phone.recordings()
            sent, heard = (read_wav(recordings[k])[0] for k in ("enc", "dec"))
        ended = kefu.wait_event("call_ended")
    try:
        assert "SRTP is Enabled" in log and "Call established" in log, log[-3000:]
        incoming = kefu.events("call_incoming")[0]
        assert str(incoming["source"]).startswith("tls:"), incoming
        assert started["srtp"] == SUITE and started["codec"] == "PCMU", started
        assert during and isinstance(rtp := during[0]["rtp"], dict), during
        assert rtp["srtp"] == SUITE, rtp
        assert ended["reason"] == "remote hangup", ended

        # Both directions decrypted: baresip hears its own voice back.
        delay, corr = echo_delay_and_similarity(sent, heard, max_delay_ms=500)
        assert corr > 0.8 and delay < 300, (delay, corr, log[-2000:])

        # On the wire: SRTP, not RTP. Every audio packet each way ends in the auth tag, and
        # read as PCMU its payload is noise, not the caller's voice.
        streams = rtp_streams(cap.path)
        out = find_stream(streams, src_port=started["remote"][1])
        back = find_stream(streams, dst_port=started["remote"][1])
        for stream in (out, back):
            audio = [p for p in stream.packets if p.payload_type == 0]
            assert len(audio) >= 100, len(audio)  # 4 s at 50 packets/s, less the set-up
            assert {len(p.payload) for p in audio} == {160 + TAG}, stream.key
            _, wire_corr = echo_delay_and_similarity(sent, stream.pcm(), max_delay_ms=500)
            assert abs(wire_corr) < 0.2, (stream.key, wire_corr)
    finally:
        cap.cleanup()


def test_baresip_with_an_untrusted_client_certificate_is_refused(
    kefu_factory, pki: Pki, tmp_path: Path
) -> None:
    kefu, tls = tls_kefu(kefu_factory, pki)
    wav = make_speech_wav(tmp_path / "caller.wav", 1.0)
    with start_baresip(
        f"sip:echo@{tls};transport=tls",
        wav,
        hangup_after=3,
        tls_ca=pki.cert("ca"),
        tls_cert=(pki.cert("selfsigned"), pki.key("selfsigned")),
        mediaenc="srtp-mand",
    ) as phone:
        phone.wait(15)
        log = phone.log
    failed = kefu.wait_event("tls_handshake_failed")
    assert failed["reason"] == "tls_bad_certificate", failed
    assert kefu.metric("kefu_sip_dropped_total", 'reason="tls_bad_certificate"') >= 1
    assert not kefu.events("call_incoming")
    assert "Call established" not in log, log[-2000:]

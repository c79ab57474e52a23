"""Every SIPp UAC scenario against the SIPp kefu mimic, over UDP and TCP, judged from SIPp's
counters on both sides and, for media, from a tshark capture of the loopback.

These send packets, so they run only in a private network namespace:
    unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/loadtest_tools'
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from loadtest.peers import (
    SippProcess,
    SippResult,
    TsharkCapture,
    run_sipp,
    run_sipp_async,
    sipp_media_port,
    start_sipp_uas,
    take_ports,
)
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams

pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        shutil.which("sipp") is None or shutil.which("tshark") is None,
        reason="needs sipp (sip-tester) and tshark",
    ),
]
transports = pytest.mark.parametrize("transport", ["u1", "t1"])


def _uas(transport: str, mode: str, **variables: object) -> SippProcess:
    return start_sipp_uas(transport=transport, variables={"mode": mode, **variables})


def _call(uas: SippProcess, scenario: str, transport: str, **kw: object) -> SippResult:
    return run_sipp(
        scenario, f"127.0.0.1:{uas.port}", transport=transport, local_port=take_ports(),
        timeout=15, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def _assert_ok(uac: SippResult, uas: SippResult, calls: int = 1) -> None:
    assert uac.ok and uac.successful == calls, uac.errors + uac.stderr_tail
    assert uas.ok and uas.successful == calls, uas.errors + uas.stderr_tail


def _message_count(screen: str, message: str) -> int:
    """Sum of the 'Messages' column over the scenario screen's rows for ``message``
    (e.g. '  ----------> INFO   1'); a scenario may expect one message in several places."""
    rows = re.findall(rf"^\s+<?-+>? +{re.escape(message)}\s+(\d+)", screen, re.MULTILINE)
    return sum(int(n) for n in rows)


@transports
def test_echo_call_round_trips_media(transport: str, speech_pcap: Path) -> None:
    media = sipp_media_port()
    with _uas(transport, "echo") as uas, TsharkCapture(ports=[media]) as cap:
        uac = _call(uas, "uac_echo", transport, media_port=media,
                    keys={"pcap": speech_pcap}, variables={"audio_ms": 1000})  # fmt: skip
        mimic = uas.stop()
    try:
        _assert_ok(uac, mimic)
        streams = rtp_streams(cap.path)
        sent = find_stream(streams, src_port=media)
        echoed = find_stream(streams, dst_port=media)
        for stream in (sent, echoed):
            stats = stream.stats()
            assert (stats.packets, stats.lost, stats.duplicates) == (50, 0, 0)
            assert stats.jitter_ms < 50  # sanity (ms, not s); SIPp's pacing on a busy box varies
        t0 = sent.packets[0].arrival
        delay, corr = echo_delay_and_similarity(sent.pcm_by_arrival(t0), echoed.pcm_by_arrival(t0))
        print(f"echo delay {delay} ms, correlation {corr:.4f}")
        assert delay < 200 and corr > 0.95  # the content is the check; the delay only sanity
    finally:
        cap.cleanup()


@transports
def test_cancel_while_ringing(transport: str) -> None:
    with _uas(transport, "ring") as uas:
        uac = _call(uas, "uac_cancel", transport)
        mimic = uas.stop()
    _assert_ok(uac, mimic)
    assert _message_count(mimic.screen, "487") == 1


@transports
def test_options_keepalive(transport: str) -> None:
    with _uas(transport, "echo") as uas:
        uac = _call(uas, "uac_options", transport, calls=5, rate=50)
        mimic = uas.stop()
    _assert_ok(uac, mimic, calls=5)


@transports
@pytest.mark.parametrize("answer", [200, 503])
def test_node_status_stand_in_answers_options(transport: str, answer: int) -> None:
    """uas_node_status answers the dispatcher's probe with the status asked for, and only
    that one (tests/e2e/test_cluster_sip.py puts it behind Kamailio)."""
    uas = start_sipp_uas(
        "uas_node_status", transport=transport, rtp_echo=False,
        variables={"options_answer": answer},
    )  # fmt: skip
    with uas:
        uac = _call(uas, "uac_options", transport, calls=3, rate=50)
        stand_in = uas.stop()
    assert stand_in.ok and stand_in.successful == 3, stand_in.errors + stand_in.stderr_tail
    assert _message_count(stand_in.screen, str(answer)) == 3, stand_in.screen
    assert _message_count(stand_in.screen, str(200 if answer == 503 else 503)) == 0
    if answer == 200:
        assert uac.ok and uac.successful == 3, uac.errors
    else:
        assert uac.failed == 3 and "503 Service Unavailable" in uac.errors


@transports
def test_kefu_hangs_up(transport: str, speech_pcap: Path) -> None:
    with _uas(transport, "hangup", hangup_ms=600) as uas:
        uac = _call(uas, "uac_wait_bye", transport, media_port=sipp_media_port(),
                    keys={"pcap": speech_pcap})  # fmt: skip
        mimic = uas.stop()
    _assert_ok(uac, mimic)
    h, m, sec, usec = (int(x) for x in uac.stats[-1]["CallLength(C)"].split(":"))
    assert (h * 3600 + m * 60 + sec) * 1000 + usec / 1000 >= 600


@transports
def test_rfc4733_zero_then_refer(transport: str, dtmf0_pcap: Path) -> None:
    media = sipp_media_port()
    with _uas(transport, "refer") as uas, TsharkCapture(ports=[media]) as cap:
        uac = _call(uas, "uac_dtmf_refer", transport, media_port=media,
                    keys={"pcap": dtmf0_pcap})  # fmt: skip
        mimic = uas.stop()
    try:
        _assert_ok(uac, mimic)
        for message in ("REFER", "202", "NOTIFY"):
            assert _message_count(mimic.screen, message) == 1, message
        # the mimic cannot hear RFC 4733 (it transfers on a timer); the wire shows the "0"
        assert find_stream(rtp_streams(cap.path), src_port=media).dtmf_digits() == "0"
    finally:
        cap.cleanup()


@transports
def test_info_dtmf_then_refer(transport: str, speech_pcap: Path) -> None:
    with _uas(transport, "refer") as uas:
        uac = _call(uas, "uac_info_dtmf", transport, media_port=sipp_media_port(),
                    keys={"pcap": speech_pcap})  # fmt: skip
        mimic = uas.stop()
    _assert_ok(uac, mimic)
    assert _message_count(mimic.screen, "INFO") == 1
    assert _message_count(mimic.screen, "REFER") == 1


async def test_run_sipp_async_leaves_the_loop_free() -> None:
    """Against an in-process kefu the loop must keep serving while SIPp runs."""
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    with _uas("u1", "echo") as uas:
        ticker = asyncio.create_task(tick())
        uac = await run_sipp_async("uac_options", f"127.0.0.1:{uas.port}", calls=2, timeout=10)
        ticker.cancel()
        mimic = uas.stop()
    _assert_ok(uac, mimic, calls=2)
    assert ticks > 0


def test_failure_is_reported() -> None:
    """A scenario that cannot complete shows up as failed, with SIPp's reason."""
    with _uas("u1", "echo") as uas:
        uac = _call(uas, "uac_cancel", "u1", extra=["-recv_timeout", "1000"])
        uas.stop()
    assert not uac.ok and uac.failed == 1 and uac.returncode == 1
    assert uac.counter("FailedCall(C)") == 1 and uac.counter("NoSuchCounter") == 0


def test_concurrent_echo_calls(speech_pcap: Path) -> None:
    """Load shape: several calls at once, all replaying from the one -mp port."""
    media = sipp_media_port()
    with _uas("u1", "echo") as uas, TsharkCapture(ports=[media]) as cap:
        uac = _call(uas, "uac_echo", "u1", media_port=media, calls=4, rate=20,
                    max_concurrent=4, keys={"pcap": speech_pcap},
                    variables={"audio_ms": 1000})  # fmt: skip
        mimic = uas.stop()
    try:
        _assert_ok(uac, mimic, calls=4)
        assert int(uac.stats[-1]["OutgoingCall(C)"]) == 4
        # one pcap, one SSRC, one source port: the four calls share a stream key here
        # (against kefu each call has its own kefu port, so dst_port tells them apart)
        sent = find_stream(rtp_streams(cap.path), src_port=media)
        assert len(sent.packets) == 200
    finally:
        cap.cleanup()

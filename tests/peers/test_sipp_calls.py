"""Real peers against a real ``kefu serve``: SIPp (UDP and TCP), baresip, raw torture datagrams.

Media is checked on the wire: tshark captures loopback and :mod:`loadtest.rtpcap` compares what
the caller sent with what kefu echoed.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from loadtest.pcap import DtmfEvent, make_rtp_pcap, speech_like_pcm
from loadtest.peers import TsharkCapture, run_sipp, sipp_media_port, start_baresip, take_ports
from loadtest.rtpcap import echo_delay_and_similarity, find_stream, rtp_streams

pytestmark = [pytest.mark.netns, pytest.mark.peer]

TESTDATA = Path(__file__).resolve().parents[1] / "testdata"


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, float]:
    pcm = speech_like_pcm(2.0)
    path = tmp_path_factory.mktemp("pcap") / "speech.pcap"
    seconds = make_rtp_pcap(path, pcm)
    return path, pcm, seconds


@pytest.fixture(scope="module")
def speech_dtmf0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pcap") / "dtmf0.pcap"
    make_rtp_pcap(path, speech_like_pcm(2.0), dtmf=[DtmfEvent("0", at=0.6)])
    return path


@pytest.mark.parametrize("transport", ["u1", "t1"])
def test_echo_call_carries_audio_both_ways(kefu, speech, transport: str) -> None:
    pcap, pcm, seconds = speech
    media_port = sipp_media_port()
    with TsharkCapture(ports=[media_port]) as capture:
        result = run_sipp(
            "uac_echo",
            kefu.sip,
            transport=transport,
            media_port=media_port,
            keys={"pcap": pcap},
            variables={"audio_ms": int(seconds * 1000)},
            timeout=20,
        )
    assert result.ok, result.errors or result.stderr_tail
    streams = rtp_streams(capture.path, ports=[media_port])
    sent = find_stream(streams, src_port=media_port)
    echoed = find_stream(streams, dst_port=media_port)
    echoed_share, delay_ms = _echo_match(sent, echoed)
    assert echoed_share > 0.95
    # kefu's echo is immediate plus its jitter buffer (~60 ms on an idle box); the bound is
    # generous for a loaded CI box: it catches an echo held for seconds, not a slow machine.
    assert delay_ms < 500
    _, similarity = echo_delay_and_similarity(sent.pcm(), echoed.pcm())
    assert similarity > 0.5
    stats = echoed.stats()
    assert stats.lost == 0
    assert kefu.metric("kefu_calls_total", 'result="completed"') == 1


def _echo_match(sent, echoed) -> tuple[float, float]:
    """Share of the caller's distinct packets that came back, and the median echo delay (ms).

    G.711 passes through kefu's echo untouched, so payloads match byte for byte; silence
    repeats one payload and is left out.
    """
    counts: dict[bytes, int] = {}
    for p in sent.packets:
        counts[p.payload] = counts.get(p.payload, 0) + 1
    unique = {p.payload: p.arrival for p in sent.packets if counts[p.payload] == 1}
    back = {p.payload: p.arrival for p in echoed.packets if p.payload in unique}
    delays = sorted(1000 * (back[k] - unique[k]) for k in back)
    median = delays[len(delays) // 2] if delays else float("inf")
    return len(back) / max(1, len(unique)), median


def test_cancel_before_answer(kefu_factory) -> None:
    kefu = kefu_factory("--ring-seconds", "3")
    result = run_sipp("uac_cancel", kefu.sip, timeout=15)
    assert result.ok, result.errors
    assert kefu.wait_event("call_ended")["reason"] == "cancelled"
    assert kefu.metric("kefu_active_calls") == 0


def test_kefu_hangs_up_with_bye(kefu_factory, speech) -> None:
    kefu = kefu_factory("--max-call-seconds", "1.5")
    pcap, _, _ = speech
    result = run_sipp(
        "uac_wait_bye", kefu.sip, media_port=sipp_media_port(), keys={"pcap": pcap}, timeout=15
    )
    assert result.ok, result.errors
    assert kefu.events("call_ended")[0]["reason"] == "max_call_seconds"


@pytest.mark.parametrize("transport", ["u1", "t1"])
def test_options_keepalive(kefu, transport: str) -> None:
    result = run_sipp("uac_options", kefu.sip, transport=transport, calls=20, rate=50, timeout=10)
    assert result.ok and result.successful == 20, result.errors


def test_rfc4733_dtmf_zero_transfers_with_refer(kefu_factory, speech_dtmf0) -> None:
    kefu = kefu_factory("--transfer-target", "sip:queue@127.0.0.1:5099")
    result = run_sipp(
        "uac_dtmf_refer",
        kefu.sip,
        media_port=sipp_media_port(),
        keys={"pcap": speech_dtmf0},
        timeout=20,
    )
    assert result.ok, result.errors
    assert [e["digit"] for e in kefu.events("dtmf")] == ["0"]
    ended = kefu.events("call_ended")
    assert ended and ended[0]["reason"] == "transferred"
    assert kefu.metric("kefu_calls_total", 'result="completed"') == 1


def test_info_dtmf_transfers_with_refer(kefu_factory, speech) -> None:
    kefu = kefu_factory("--transfer-target", "sip:queue@127.0.0.1:5099")
    pcap, _, _ = speech
    result = run_sipp(
        "uac_info_dtmf", kefu.sip, media_port=sipp_media_port(), keys={"pcap": pcap}, timeout=20
    )
    assert result.ok, result.errors
    assert [(e["digit"], e["source"]) for e in kefu.events("dtmf")] == [("0", "info")]


def test_baresip_completes_a_call(kefu, tmp_path: Path) -> None:
    from loadtest.pcap import make_speech_wav, read_wav

    wav = make_speech_wav(tmp_path / "caller.wav", 3.0)
    with start_baresip(f"sip:ai@{kefu.sip}", wav, hangup_after=5) as baresip:
        baresip.wait(15)
        log = baresip.log
        recordings = baresip.recordings()
        sent, heard = (read_wav(recordings[k])[0] for k in ("enc", "dec"))
    assert kefu.events("call_incoming"), log[-2000:]
    # kefu (echo mode) sent back what baresip said: its own recordings, compared
    delay, corr = echo_delay_and_similarity(sent, heard, max_delay_ms=500)
    assert corr > 0.8 and delay < 300, (delay, corr, log[-2000:])
    assert kefu.wait_event("call_ended")


def _torture() -> list[Path]:
    return sorted(p for p in TESTDATA.glob("rfc*/*") if p.is_file() and p.suffix != ".md")


def test_torture_datagrams_then_options_still_answered(kefu) -> None:
    host, port = kefu.sip_host, kefu.sip_port
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.05)
        for path in _torture():
            sock.sendto(path.read_bytes(), (host, port))
            try:
                while True:
                    sock.recvfrom(65535)
            except TimeoutError:
                pass
    assert kefu.proc.poll() is None
    result = run_sipp("uac_options", kefu.sip, calls=3, rate=10, timeout=10)
    assert result.ok, result.errors


def test_two_sip_callers_in_one_room_hear_each_other(kefu_factory, tmp_path: Path) -> None:
    import numpy as np

    from loadtest.peers import run_sipp_async

    kefu = kefu_factory(env={"KEFU_CALLS_SIP_ROOM": "lobby"})
    pcm_a = speech_like_pcm(3.0, seed=1)
    pcap_a = tmp_path / "a.pcap"
    make_rtp_pcap(pcap_a, pcm_a)
    pcap_b = tmp_path / "b.pcap"
    make_rtp_pcap(pcap_b, np.zeros(24000, dtype=np.int16))

    import asyncio

    def caller(media_port: int, local_port: int, pcap: Path):
        return run_sipp_async(
            "uac_echo",
            kefu.sip,
            media_port=media_port,
            local_port=local_port,
            keys={"pcap": pcap},
            variables={"audio_ms": 3000},
            timeout=20,
        )

    media_a, media_b = sipp_media_port(), sipp_media_port()

    async def both():
        return await asyncio.gather(
            caller(media_a, take_ports(), pcap_a), caller(media_b, take_ports(), pcap_b)
        )

    with TsharkCapture(ports=[media_a, media_b]) as capture:
        results = asyncio.run(both())
    assert all(r.ok for r in results), [r.errors for r in results]
    streams = rtp_streams(capture.path, ports=[media_a, media_b])
    to_b = find_stream(streams, dst_port=media_b)
    heard = to_b.pcm()
    # B (silent) hears A's speech through the room. The path re-encodes (G.711 → Opus → mix
    # → G.711) and re-times it, so compare loudness envelopes (A's syllable rhythm), not
    # samples.
    assert np.abs(heard.astype(np.int32)).mean() > 200
    assert _envelope_similarity(pcm_a, heard) > 0.7


def _envelope_similarity(sent, heard, frame: int = 160, max_lag: int = 50) -> float:
    """Best correlation of 20 ms RMS envelopes over lags up to 1 s."""
    import numpy as np

    def envelope(pcm):
        n = len(pcm) // frame
        x = pcm[: n * frame].astype(np.float64).reshape(n, frame)
        return np.sqrt((x**2).mean(axis=1))

    a, b = envelope(sent), envelope(heard)
    best = 0.0
    for lag in range(min(max_lag, len(b) - 10)):
        n = min(len(a), len(b) - lag)
        x, y = a[:n], b[lag : lag + n]
        if x.std() > 0 and y.std() > 0:
            best = max(best, float(np.corrcoef(x, y)[0, 1]))
    return best


def test_sigterm_drains_new_calls_get_503_and_calls_in_progress_finish(
    kefu_factory, speech
) -> None:
    import signal
    import threading

    from helpers.sip_trunk import invite

    kefu = kefu_factory(env={"KEFU_CALLS_DRAIN_TIMEOUT": "30"})
    pcap, _, seconds = speech
    outcome = {}

    def call() -> None:
        outcome["result"] = run_sipp(
            "uac_echo",
            kefu.sip,
            media_port=sipp_media_port(),
            keys={"pcap": pcap},
            # the call holds 6 s after the pcap: room for a slow box to send the late INVITE
            # while it is still in progress
            variables={"audio_ms": int(seconds * 1000) + 5000},
            timeout=30,
        )

    caller = threading.Thread(target=call)
    caller.start()
    kefu.wait_event("call_incoming", timeout=20)
    deadline = time.monotonic() + 20
    while kefu.metric("kefu_active_calls") < 1:
        assert time.monotonic() < deadline, "the call never became active"
        time.sleep(0.05)
    kefu.proc.send_signal(signal.SIGTERM)
    kefu.wait_event("draining")  # not a fixed sleep: kefu says when new calls get 503
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(3)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.sendto(
            invite(via_host=f"127.0.0.1:{port}", call_id="late"), (kefu.sip_host, kefu.sip_port)
        )
        statuses = []
        while not statuses or statuses[-1] < 200:
            statuses.append(int(sock.recvfrom(65535)[0].split(b" ", 2)[1]))
    assert statuses[-1] == 503
    caller.join(40)
    assert outcome["result"].ok, outcome["result"].errors
    assert kefu.proc.wait(40) == 0


def test_digest_authenticated_trunk(kefu_factory) -> None:
    env = {"KEFU_SIP_AUTH_USERS": "vcc:s3cret", "KEFU_SIP_AUTH_ALGORITHM": "MD5"}
    kefu = kefu_factory(env=env)
    good = run_sipp("uac_auth", kefu.sip, timeout=15, extra=["-au", "vcc", "-ap", "s3cret"])
    assert good.ok, good.errors
    bad = run_sipp("uac_auth", kefu.sip, timeout=6, extra=["-au", "vcc", "-ap", "wrong"])
    assert not bad.ok
    assert kefu.metric("kefu_calls_total", 'result="completed"') == 1

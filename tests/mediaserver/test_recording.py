"""Call recordings: a real call through the in-process server is recorded as a stereo WAV
with the caller on the left and what kefu played on the right, on one timeline; a disk that
fails, a queue that overflows and old files are handled without touching the call."""

from __future__ import annotations

import asyncio
import os
import time
import wave
from pathlib import Path

import numpy as np
import pytest
from helpers.inproc import server_config
from sfu_util import until

from kefu.codecs.info import codec_info
from kefu.errors import ConfigError
from kefu.mediaserver.config import CallsConfig
from kefu.mediaserver.media import PcmTrack
from kefu.mediaserver.recording import (
    CALLER,
    KEFU,
    RecordingPolicy,
    RecordingWriter,
    prepare_dir,
    prune,
)
from kefu.mediaserver.server import KefuServer
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.ports import PortAllocator
from loadtest.pcap import write_wav
from loadtest.peers import take_ports
from tests.mediaserver.test_server_echo import sip, trunk_socket

pytestmark = pytest.mark.netns

RATE = 8000


def sine(hz: float, seconds: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def dominant_hz(pcm: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    return float(np.argmax(spectrum) * RATE / len(pcm))


def voiced(pcm: np.ndarray, frame: int = 160) -> np.ndarray:
    """Indices of 20 ms frames with sound in them."""
    n = len(pcm) // frame
    rms = np.sqrt(np.mean(pcm[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1))
    return np.flatnonzero(rms > 500)


def read_stereo(path: Path) -> tuple[int, np.ndarray]:
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (2, 2)
        pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").reshape(-1, 2)
        return w.getframerate(), pcm


async def test_a_call_is_recorded_caller_left_kefu_right_in_sync(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.wav"
    write_wav(prompt, sine(1000, 1.0), RATE)  # kefu plays 1 s at 1 kHz, then echoes
    config = server_config(
        tmp_path / "state",
        calls={
            "media_mode": "prompt",
            "prompt_wav": str(prompt),
            "record": True,
            "recordings_dir": str(tmp_path / "rec"),
        },
    )
    server = KefuServer(config)
    await server.start()
    try:
        port = server.sip_address[1]
        trunk = await trunk_socket()
        phone_lo = take_ports(2, even=True)
        phone = await RtpEndpoint.open("127.0.0.1", PortAllocator(phone_lo, phone_lo + 1))
        trunk.transport.sendto(
            sip("INVITE", port, phone.local_port, call_id="rec-1"), server.sip_address
        )
        ok = await trunk.expect(200)
        kefu_rtp = int(ok.body.decode().split("m=audio ")[1].split()[0])
        tag = ok.to.tag or ""
        ack = sip("ACK", port, to_tag=tag, branch="z9hG4bK-ack", call_id="rec-1")
        trunk.transport.sendto(ack, server.sip_address)
        (call,) = server.calls.values()
        phone.start(("127.0.0.1", kefu_rtp), codec_info("PCMU"), 0, 101)
        phone.play(PcmTrack(sine(440, 3.0), RATE))  # the caller: 3 s at 440 Hz
        await asyncio.sleep(3.6)
        bye = sip("BYE", port, cseq=2, to_tag=tag, branch="z9hG4bK-bye", call_id="rec-1")
        trunk.transport.sendto(bye, server.sip_address)
        await trunk.expect(200)
        await phone.close()
        await until(lambda: server.recordings is not None and server.recordings.written == 1)
    finally:
        await server.stop()
    (path,) = (tmp_path / "rec").glob(f"*/{call.id}.wav")
    rate, pcm = read_stereo(path)
    assert rate == RATE
    left, right = pcm[:, CALLER], pcm[:, KEFU]
    # Left: the caller's 3 s tone and nothing else.
    said = voiced(left)
    assert 2.8 <= len(said) * 0.02 <= 3.2, len(said)
    assert abs(dominant_hz(left[said[0] * 160 : (said[-1] + 1) * 160]) - 440) < 10
    # Right: the 1 s prompt at 1 kHz first, then the caller's tone echoed back.
    played = voiced(right)
    first_s = played[0] * 0.02
    assert abs(dominant_hz(right[played[0] * 160 : played[0] * 160 + 6400]) - 1000) < 10
    echo = right[int((first_s + 1.2) * RATE) : int((first_s + 2.5) * RATE)]
    assert abs(dominant_hz(echo) - 440) < 10
    # One timeline: the echo stops within a few hundred ms of the caller stopping.
    lag_s = (played[-1] - said[-1]) * 0.02
    assert 0.0 <= lag_s < 0.4, lag_s
    assert list((tmp_path / "rec" / ".partial").iterdir()) == []  # temporary files gone


async def _call_from(server: KefuServer, trunk_host: str, hz: float, call_id: str) -> str:
    """One 1.5 s call whose caller says a tone at ``hz``, its SIP from ``trunk_host``; the
    call's id once it has ended."""
    port = server.sip_address[1]
    trunk = await trunk_socket(trunk_host)
    phone_lo = take_ports(2, even=True)
    phone = await RtpEndpoint.open("127.0.0.1", PortAllocator(phone_lo, phone_lo + 1))
    try:
        trunk.transport.sendto(
            sip("INVITE", port, phone.local_port, branch=f"z9hG4bK-{call_id}", call_id=call_id),
            server.sip_address,
        )
        ok = await trunk.expect(200)
        kefu_rtp = int(ok.body.decode().split("m=audio ")[1].split()[0])
        tag = ok.to.tag or ""
        ack = sip("ACK", port, to_tag=tag, branch=f"z9hG4bK-ack-{call_id}", call_id=call_id)
        trunk.transport.sendto(ack, server.sip_address)
        (call,) = [c for c in server.calls.values() if c.state.value != "ended"]
        phone.start(("127.0.0.1", kefu_rtp), codec_info("PCMU"), 0, 101)
        phone.play(PcmTrack(sine(hz, 1.5), RATE))
        await asyncio.sleep(1.8)
        bye = sip("BYE", port, cseq=2, to_tag=tag, branch=f"z9hG4bK-bye-{call_id}", call_id=call_id)
        trunk.transport.sendto(bye, server.sip_address)
        await trunk.expect(200)
        await until(lambda: not server.calls)
    finally:
        await phone.close()
        trunk.transport.close()
    return call.id


async def test_only_the_calls_of_a_listed_trunk_are_recorded(tmp_path: Path) -> None:
    config = server_config(
        tmp_path / "state",
        calls={"record_trunks": ["127.0.0.2/32"], "recordings_dir": str(tmp_path / "rec")},
    )
    assert not config.calls.record
    server = KefuServer(config)
    await server.start()
    try:
        listed = await _call_from(server, "127.0.0.2", 440, "rec-listed")
        other = await _call_from(server, "127.0.0.1", 660, "rec-other")
        await until(lambda: server.recordings is not None and server.recordings.written == 1)
        metrics = server.metrics.render().decode()
    finally:
        await server.stop()
    (path,) = (tmp_path / "rec").glob("*/*.wav")
    assert path.stem == listed and listed != other
    _, pcm = read_stereo(path)
    said = voiced(pcm[:, CALLER])
    assert abs(dominant_hz(pcm[said[0] * 160 : (said[-1] + 1) * 160, CALLER]) - 440) < 10
    assert 'kefu_recordings_total{result="written"} 1.0' in metrics


def test_the_recording_policy_matches_trunk_networks() -> None:
    policy = RecordingPolicy.from_config(
        CallsConfig(record_trunks=("10.0.0.0/24", "192.168.1.7", "2001:db8::/32"))
    )
    assert policy.enabled and not policy.every_call
    assert policy.records("10.0.0.99") and policy.records("192.168.1.7")
    assert policy.records("[2001:db8::5]") and policy.records("2001:db8::5")
    assert not policy.records("10.0.1.1") and not policy.records("192.168.1.8")
    assert not policy.records("::ffff:10.0.0.1") and not policy.records("")
    assert not RecordingPolicy.from_config(CallsConfig()).enabled
    everything = RecordingPolicy.from_config(CallsConfig(record=True))
    assert everything.enabled and everything.records("203.0.113.9")


def payload(pcm: np.ndarray) -> bytes:
    from kefu.codecs.registry import make_encoder

    return make_encoder("PCMU").encode(pcm)


async def test_a_failing_disk_loses_the_recording_not_the_call(tmp_path: Path) -> None:
    writer = RecordingWriter(prepare_dir(tmp_path / "rec"))
    rec = writer.open("c-disk", 0.0)
    for k in range(5):
        rec.feed(CALLER, 0.02 * (k + 1), "PCMU", payload(sine(440, 0.02)))
    await until(lambda: writer._queue.empty())
    # The day folder cannot be created: a file stands where it would go.
    day = time.strftime("%Y-%m-%d", time.gmtime())
    (tmp_path / "rec" / day).write_bytes(b"not a folder")
    rec.close()
    await until(lambda: writer.failed == 1)
    writer.close()
    assert writer.written == 0
    assert list((tmp_path / "rec" / ".partial").iterdir()) == []


async def test_a_queue_that_overflows_drops_frames_and_counts_them(tmp_path: Path) -> None:
    writer = RecordingWriter(prepare_dir(tmp_path / "rec"), max_pending=0)
    rec = writer.open("c-full", 0.0)
    for k in range(50):
        rec.feed(KEFU, 0.02 * k, "PCMU", payload(sine(440, 0.02)))
    rec.close()  # a close always goes through
    writer.close()
    assert (writer.dropped, writer.written, writer.failed) == (50, 0, 0)
    assert list((tmp_path / "rec").glob("*/*.wav")) == []  # no audio: no file


def test_a_recordings_folder_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError, match="calls.recordings_dir .*file/rec is not writable"):
        prepare_dir(tmp_path / "file" / "rec")


def test_old_recordings_are_pruned_and_recent_ones_kept(tmp_path: Path) -> None:
    now = time.time()
    old_day, new_day = tmp_path / "2026-01-01", tmp_path / "2026-12-04"
    old_day.mkdir()
    new_day.mkdir()
    (tmp_path / ".partial").mkdir()
    files = {
        old_day / "a.wav": now - 40 * 86400,
        old_day / "b.wav.part": now - 40 * 86400,
        new_day / "c.wav": now - 2 * 86400,
        tmp_path / ".partial" / "d.caller.raw": now - 2 * 86400,
        tmp_path / ".partial" / "e.caller.raw": now - 60,
        new_day / "notes.txt": now - 400 * 86400,  # not ours: never touched
    }
    for file, mtime in files.items():
        file.write_bytes(b"x")
        os.utime(file, (mtime, mtime))
    assert prune(tmp_path, 30.0, now=now) == 3
    left = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["c.wav", "e.caller.raw", "notes.txt"]
    assert not old_day.exists()

"""RTP relay cost per packet: kefu's echo next to rtpengine (userspace), in one run.

One generator (this process: plain non-blocking sockets on one epoll loop, no asyncio) sends
N G.711 streams at 50 packets/s, first to N kefu echo calls (set up over SIP by a minimal
UA here), then through N rtpengine calls (set up with the ng control protocol) from
generator port A_i to receiver port B_i. Each relay's CPU comes from /proc/PID/stat over the
send window and is divided by the packets it forwarded back to us.

rtpengine (Debian ``rtpengine-daemon``) runs without its kernel module: ``--table=-1``.
Run inside ``unshare -n sh -c 'ip link set lo up && ...'``.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kefu.rtp.srtp import SrtpContext
from kefu.sip import sdes
from kefu.sip.message import Response, parse_message
from loadtest.kefu_process import (
    CpuSample,
    cpu_percent,
    load_average,
    sample_cpu,
)
from loadtest.peers import LOCALHOST, stop_process
from loadtest.sip_load import start_kefu

PTIME = 0.020
PAYLOAD = bytes([0xFF]) * 160  # 20 ms of PCMU silence: the relays never look inside
GEN_PORT_BASE = 20000
RTPENGINE_NG_PORT = 2223
RTPENGINE_PORTS = (40000, 49999)


# --- bencode (BEP 3), as the ng protocol speaks it -----------------------------------------


def bencode(value: Any) -> bytes:
    """Encode ints, str/bytes, lists and dicts (keys sorted, as BEP 3 requires)."""
    if isinstance(value, bool):
        raise TypeError("bencode has no booleans")
    if isinstance(value, int):
        return b"i%de" % value
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes | bytearray):
        return b"%d:%s" % (len(value), bytes(value))
    if isinstance(value, list | tuple):
        return b"l" + b"".join(bencode(v) for v in value) + b"e"
    if isinstance(value, dict):
        items = sorted((k.encode() if isinstance(k, str) else k, v) for k, v in value.items())
        return b"d" + b"".join(bencode(k) + bencode(v) for k, v in items) + b"e"
    raise TypeError(f"cannot bencode {type(value).__name__}")


def bdecode(data: bytes) -> Any:
    """Decode one bencoded value; strings come back as ``str`` when they are UTF-8."""
    value, end = _bdecode_at(data, 0)
    if end != len(data):
        raise ValueError(f"trailing bytes after bencoded value at {end}")
    return value


def _bdecode_at(data: bytes, i: int) -> tuple[Any, int]:
    if i >= len(data):
        raise ValueError("bencoded value truncated")
    head = data[i : i + 1]
    if head == b"i":
        end = data.index(b"e", i)
        return int(data[i + 1 : end]), end + 1
    if head in (b"l", b"d"):
        items: list[Any] = []
        i += 1
        while data[i : i + 1] != b"e":
            item, i = _bdecode_at(data, i)
            items.append(item)
        if head == b"l":
            return items, i + 1
        if len(items) % 2:
            raise ValueError("bencoded dict with a key but no value")
        return dict(zip(items[::2], items[1::2], strict=True)), i + 1
    if head.isdigit():
        colon = data.index(b":", i)
        length = int(data[i:colon])
        raw = data[colon + 1 : colon + 1 + length]
        if len(raw) != length:
            raise ValueError("bencoded string truncated")
        try:
            return raw.decode(), colon + 1 + length
        except UnicodeDecodeError:
            return raw, colon + 1 + length
    raise ValueError(f"bad bencode byte {head!r} at {i}")


# --- rtpengine ---------------------------------------------------------------------------


def audio_sdp(port: int, session: int = 1, crypto: str | None = None) -> str:
    """A PCMU-only offer/answer for one RTP stream at 127.0.0.1:port (RFC 4566); with
    ``crypto`` (an ``a=crypto`` value, RFC 4568) an ``RTP/SAVP`` one."""
    profile = "RTP/SAVP" if crypto else "RTP/AVP"
    return (
        f"v=0\r\no=- {session} 1 IN IP4 {LOCALHOST}\r\ns=-\r\nc=IN IP4 {LOCALHOST}\r\n"
        f"t=0 0\r\nm=audio {port} {profile} 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
        + (f"a=crypto:{crypto}\r\n" if crypto else "")
    )


def sdp_audio_port(sdp: str) -> int:
    m = re.search(r"^m=audio (\d+) ", sdp, re.MULTILINE)
    if m is None:
        raise ValueError(f"no m=audio line in SDP: {sdp[:200]!r}")
    return int(m.group(1))


class RtpengineProcess:
    """A userspace-only rtpengine on 127.0.0.1, driven over ng; stop() by its PID."""

    def __init__(self, ng_port: int = RTPENGINE_NG_PORT, threads: int | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="kefu-rtpengine-"))
        self.ng = (LOCALHOST, ng_port)
        cmd = [
            "rtpengine",
            "--config-file=none",
            "--table=-1",
            f"--interface={LOCALHOST}",
            f"--listen-ng={LOCALHOST}:{ng_port}",
            f"--port-min={RTPENGINE_PORTS[0]}",
            f"--port-max={RTPENGINE_PORTS[1]}",
            "--foreground",
            "--log-stderr",
            "--log-level=4",
            f"--pidfile={self.workdir / 'pid'}",
        ]
        if threads:
            cmd.append(f"--num-threads={threads}")
        with open(self.workdir / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOCALHOST, 0))
        self._cookie = 0
        try:
            self._wait_ready()
        except Exception:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rtpengine exited: {self.log()[-2000:]}")
            with contextlib.suppress(TimeoutError):
                if self.command({"command": "ping"}, timeout=0.2).get("result") == "pong":
                    return
        raise TimeoutError(f"rtpengine did not answer ping: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.workdir / "stderr.log").read_text(errors="replace")

    def command(self, message: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
        """Send one ng command (``cookie bencoded-dict``) and return the decoded reply."""
        self._cookie += 1
        cookie = f"k{self._cookie}".encode()
        self.sock.settimeout(timeout)
        self.sock.sendto(cookie + b" " + bencode(message), self.ng)
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data, _ = self.sock.recvfrom(65535)
            got, _, body = data.partition(b" ")
            if got == cookie:  # a late reply to an earlier, timed-out command is skipped
                reply: dict[str, Any] = bdecode(body)
                if reply.get("result") == "error":
                    raise RuntimeError(f"rtpengine {message['command']}: {reply}")
                return reply

    def relay_call(self, call_id: str, port_a: int, port_b: int) -> int:
        """Offer from A, answer from B; returns the rtpengine port A must send to."""
        base = {"call-id": call_id, "from-tag": "a-" + call_id}
        self.command({"command": "offer", **base, "sdp": audio_sdp(port_a)})
        reply = self.command(
            {"command": "answer", **base, "to-tag": "b-" + call_id, "sdp": audio_sdp(port_b)}
        )
        return sdp_audio_port(str(reply["sdp"]))

    def delete(self, call_id: str) -> None:
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.command({"command": "delete", "call-id": call_id, "from-tag": "a-" + call_id})

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGTERM, 5.0)
        self.sock.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


# --- a minimal SIP UA for kefu echo calls ------------------------------------------------


@dataclass
class SipCall:
    call_id: str
    local_tag: str
    remote_tag: str
    contact: str
    media_port: int
    """kefu's RTP port from its SDP answer."""
    answer: str = ""
    """kefu's SDP answer."""


class MiniUac:
    """INVITE/ACK/BYE over UDP, one call at a time: enough to open N kefu echo calls."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((LOCALHOST, 0))
        self.port = self.sock.getsockname()[1]

    def _request(
        self, method: str, uri: str, call_id: str, tag: str, cseq: int, **kw: str
    ) -> bytes:
        to = f"<sip:echo@{self.target[0]}:{self.target[1]}>" + (
            f";tag={kw['to_tag']}" if kw.get("to_tag") else ""
        )
        body = kw.get("body", "")
        lines = [
            f"{method} {uri} SIP/2.0",
            f"Via: SIP/2.0/UDP {LOCALHOST}:{self.port};branch=z9hG4bK{uuid.uuid4().hex[:16]}",
            f"From: <sip:bench@{LOCALHOST}:{self.port}>;tag={tag}",
            f"To: {to}",
            f"Call-ID: {call_id}",
            f"CSeq: {cseq} {method}",
            f"Contact: <sip:bench@{LOCALHOST}:{self.port}>",
            "Max-Forwards: 70",
        ]
        if body:
            lines.append("Content-Type: application/sdp")
        lines.append(f"Content-Length: {len(body.encode())}")
        return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()

    def _final(self, call_id: str, method: str, timeout: float = 5.0) -> Response:
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data, _ = self.sock.recvfrom(65535)
            msg = parse_message(data)
            if (
                isinstance(msg, Response)
                and msg.call_id == call_id
                and msg.cseq.method == method
                and msg.status >= 200
            ):
                return msg

    def invite(self, media_port: int, sdp: str | None = None) -> SipCall:
        """One call whose offer is ``sdp`` (default: PCMU on ``media_port``)."""
        call_id = f"{uuid.uuid4().hex}@{LOCALHOST}"
        tag = uuid.uuid4().hex[:10]
        uri = f"sip:echo@{self.target[0]}:{self.target[1]}"
        sdp = sdp or audio_sdp(media_port)
        self.sock.sendto(self._request("INVITE", uri, call_id, tag, 1, body=sdp), self.target)
        resp = self._final(call_id, "INVITE")
        if resp.status != 200:
            raise RuntimeError(f"kefu answered INVITE with {resp.status} {resp.reason}")
        remote_tag = dict(resp.to.params).get("tag") or ""
        contact = str(resp.contacts[0].uri) if resp.contacts else uri
        answer = resp.body.decode(errors="replace")
        call = SipCall(call_id, tag, remote_tag, contact, sdp_audio_port(answer), answer)
        ack = self._request("ACK", contact, call_id, tag, 1, to_tag=remote_tag)
        self.sock.sendto(ack, self.target)
        return call

    def bye(self, call: SipCall) -> None:
        bye = self._request(
            "BYE", call.contact, call.call_id, call.local_tag, 2, to_tag=call.remote_tag
        )
        self.sock.sendto(bye, self.target)
        with contextlib.suppress(TimeoutError):
            self._final(call.call_id, "BYE", timeout=2.0)

    def close(self) -> None:
        self.sock.close()


# --- the generator ---------------------------------------------------------------------------


@dataclass
class Stream:
    tx: socket.socket
    dst: tuple[str, int]
    rx: socket.socket
    ssrc: int
    sent: int = 0
    received: int = 0
    protect: Callable[[bytes], bytes] | None = None
    """Applied to each packet before it is sent (SRTP)."""
    check: Callable[[bytes], bool] | None = None
    """Whether a packet that came back counts (SRTP: it decrypts to what was sent)."""


def open_socket(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((LOCALHOST, port))
    s.setblocking(False)
    return s


def pump(
    streams: list[Stream], seconds: float, relay_pid: int
) -> tuple[CpuSample, CpuSample, float]:
    """Send every stream at 50 pps for ``seconds`` while draining replies; CPU samples of
    the relay (and this generator) taken after a 1 s warm-up and at the end of sending."""
    by_fd = {s.rx.fileno(): s for s in streams}
    poller = select.epoll()
    for fd in by_fd:
        poller.register(fd, select.EPOLLIN)
    pids = {"relay": relay_pid, "generator": os.getpid()}
    start = time.monotonic()
    next_tick = start
    end = start + seconds
    warm = start + min(1.0, seconds / 4)
    first: CpuSample | None = None
    last: CpuSample | None = None
    seq = ts = 0
    late = 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= next_tick:
                if now >= end:
                    break
                late = max(late, now - next_tick)
                if first is None and now >= warm:
                    first = sample_cpu(pids)
                header = struct.pack("!BBHI", 0x80, 0, seq & 0xFFFF, ts & 0xFFFFFFFF)
                for s in streams:
                    packet = header + struct.pack("!I", s.ssrc) + PAYLOAD
                    if s.protect is not None:
                        packet = s.protect(packet)
                    with contextlib.suppress(BlockingIOError):
                        s.tx.sendto(packet, s.dst)
                        s.sent += 1
                seq += 1
                ts += 160
                next_tick += PTIME
                continue
            _drain(poller, by_fd, next_tick - now)
        last = sample_cpu(pids)
        drain_until = time.monotonic() + 0.3  # packets still inside the relay
        while (left := drain_until - time.monotonic()) > 0:
            _drain(poller, by_fd, left)
    finally:
        poller.close()
    if first is None:
        first = last
    return first, last, late


def _drain(poller: select.epoll, by_fd: dict[int, Stream], timeout: float) -> None:
    for fd, _ in poller.poll(max(0.0, timeout)):
        s = by_fd[fd]
        while True:
            try:
                data = s.rx.recv(2048)
            except BlockingIOError:
                break
            if len(data) >= 12 and data[0] >> 6 == 2 and data[1] & 0x7F == 0:
                if s.check is None or s.check(data):
                    s.received += 1


def _phase_result(
    name: str, streams: list[Stream], a: CpuSample, b: CpuSample, late: float
) -> dict[str, Any]:
    sent = sum(s.sent for s in streams)
    received = sum(s.received for s in streams)
    span = b.wall - a.wall
    relay_cpu = b.cpu["relay"] - a.cpu["relay"]
    forwarded_in_window = len(streams) * span / PTIME
    return {
        "relay": name,
        "streams": len(streams),
        "packets_sent": sent,
        "packets_relayed_back": received,
        "loss_pct": round(100 * (sent - received) / sent, 4) if sent else float("nan"),
        "streams_with_loss": sum(1 for s in streams if s.received < s.sent),
        "relay_cpu_pct": round(cpu_percent(a, b, "relay"), 2),
        "cpu_us_per_packet": round(1e6 * relay_cpu / forwarded_in_window, 3)
        if forwarded_in_window
        else float("nan"),
        "generator_cpu_pct": round(cpu_percent(a, b, "generator"), 2),
        "generator_worst_lateness_ms": round(1000 * late, 2),
        "window_s": round(span, 2),
    }


@contextlib.contextmanager
def _sockets(ports: list[int]) -> Iterator[list[socket.socket]]:
    socks = [open_socket(p) for p in ports]
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _srtp_stream(uac: MiniUac, sock: socket.socket, ssrc: int) -> tuple[SipCall, Stream]:
    """An echo call offering SDES-SRTP (RFC 4568); its stream protects what it sends and
    counts only echoes that decrypt, under kefu's key, to the payload sent."""
    suite = sdes.SUITES[0]
    ours = sdes.new_key()
    offer = audio_sdp(sock.getsockname()[1], crypto=str(sdes.CryptoAttribute(1, suite, ours)))
    call = uac.invite(sock.getsockname()[1], offer)
    lines = [ln[9:] for ln in call.answer.splitlines() if ln.startswith("a=crypto:")]
    if len(lines) != 1:
        raise RuntimeError(f"kefu's answer has no single a=crypto line: {call.answer!r}")
    theirs = sdes.CryptoAttribute.parse(lines[0])
    ctx = SrtpContext(sdes.SrtpKeys(theirs.suite, ours, theirs.key, theirs.tag))

    def echoed(data: bytes) -> bool:
        clear = ctx.unprotect(data)
        return isinstance(clear, bytes) and clear[12:] == PAYLOAD

    stream = Stream(sock, (LOCALHOST, call.media_port), sock, ssrc, 0, 0, ctx.protect_rtp, echoed)
    return call, stream


def kefu_phase(
    n: int, seconds: float, uvloop: bool, *, srtp: bool = False, record_dir: Path | None = None
) -> dict[str, Any]:
    """N kefu echo calls at 50 packets/s each way; with ``srtp`` every call is SDES-SRTP
    (this generator protects and unprotects with libsrtp, as a trunk would).

    With ``record_dir`` kefu records every call there (``KEFU_CALLS_RECORD``); after the BYEs
    this waits until kefu has written ``n`` recordings, and the result has ``call_seconds``,
    each call's time from its 200 OK to the end of sending (what its recording should last).
    Either way it has ``close_cpu_s``: kefu's CPU seconds from the first BYE until then.
    """
    env = (
        {"KEFU_CALLS_RECORD": "true", "KEFU_CALLS_RECORDINGS_DIR": str(record_dir)}
        if record_dir is not None
        else None
    )
    with tempfile.TemporaryDirectory(prefix="kefu-bench-relay-") as tmp:
        kefu = start_kefu(Path(tmp), uvloop=uvloop, env=env)
        uac = MiniUac((LOCALHOST, kefu.sip_port))
        calls: list[SipCall] = []
        answered: list[float] = []
        try:
            with _sockets([GEN_PORT_BASE + 2 * i for i in range(n)]) as socks:
                streams = []
                for i, sock in enumerate(socks):
                    if srtp:
                        call, stream = _srtp_stream(uac, sock, 0x1000 + i)
                    else:
                        call = uac.invite(sock.getsockname()[1])
                        stream = Stream(sock, (LOCALHOST, call.media_port), sock, 0x1000 + i)
                    answered.append(time.monotonic())
                    calls.append(call)
                    streams.append(stream)
                time.sleep(0.5)  # let kefu's idle state settle after the INVITE burst
                a, b, late = pump(streams, seconds, kefu.pid)
                result = _phase_result("kefu", streams, a, b, late)
            if record_dir is not None:
                result["call_seconds"] = [round(b.wall - t, 3) for t in answered]
            closing = sample_cpu({"kefu": kefu.pid})
            for call in calls:
                uac.bye(call)
            if record_dir is not None:
                _await_files(record_dir, n)
            closed = sample_cpu({"kefu": kefu.pid})
            if record_dir is not None:
                result["recordings_total"] = {
                    r: kefu.metric("kefu_recordings_total", f'result="{r}"')
                    for r in ("written", "failed")
                }
            result["close_cpu_s"] = round(closed.cpu["kefu"] - closing.cpu["kefu"], 3)
            result["close_s"] = round(closed.wall - closing.wall, 3)
        finally:
            uac.close()
            kefu.stop()
    result["loop"] = "uvloop" if uvloop else "asyncio"
    result["srtp"] = sdes.SUITES[0] if srtp else None
    result["record"] = record_dir is not None
    return result


def _await_files(folder: Path, n: int, timeout: float = 120.0) -> None:
    """Until ``n`` finished recordings (``<day>/<call id>.wav``) are in ``folder``, or
    ``timeout``: the folder is polled, not ``/metrics``, so the wait costs kefu no CPU."""
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("*/*.wav"))) < n and time.monotonic() < deadline:
        time.sleep(0.05)


def rtpengine_phase(n: int, seconds: float) -> dict[str, Any]:
    engine = RtpengineProcess()
    ids = [f"bench-{i}-{uuid.uuid4().hex[:8]}" for i in range(n)]
    try:
        a_ports = [GEN_PORT_BASE + 4 * i for i in range(n)]
        b_ports = [GEN_PORT_BASE + 4 * i + 2 for i in range(n)]
        with _sockets(a_ports) as tx, _sockets(b_ports) as rx:
            streams = []
            for i in range(n):
                relay_port = engine.relay_call(ids[i], a_ports[i], b_ports[i])
                streams.append(Stream(tx[i], (LOCALHOST, relay_port), rx[i], 0x2000 + i))
            time.sleep(0.5)
            a, b, late = pump(streams, seconds, engine.pid)
            result = _phase_result("rtpengine", streams, a, b, late)
        for call_id in ids:
            engine.delete(call_id)
        result["version"] = _rtpengine_version()
    finally:
        engine.stop()
    return result


def _rtpengine_version() -> str:
    try:
        out = subprocess.run(
            ["rtpengine", "--version"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout + out.stderr).strip().splitlines()[0] if out.stdout + out.stderr else "?"


def rtpengine_available() -> bool:
    return shutil.which("rtpengine") is not None


def rtp_relay(
    streams: int, seconds: float, *, uvloop: bool = True, with_rtpengine: bool = True
) -> dict[str, Any]:
    """Both relays, one after the other, with the same generator; JSON-able summary."""
    summary: dict[str, Any] = {
        "benchmark": "rtp-relay",
        "streams": streams,
        "seconds": seconds,
        "pps_per_stream": round(1 / PTIME),
        "load_average": load_average(),
    }
    summary["kefu"] = kefu_phase(streams, seconds, uvloop)
    if with_rtpengine and rtpengine_available():
        summary["rtpengine"] = rtpengine_phase(streams, seconds)
        ke, re_ = summary["kefu"]["cpu_us_per_packet"], summary["rtpengine"]["cpu_us_per_packet"]
        summary["cpu_ratio_kefu_over_rtpengine"] = round(ke / re_, 2) if re_ else None
    else:
        summary["rtpengine"] = None
        summary["cpu_ratio_kefu_over_rtpengine"] = None
    summary["load_average_after"] = load_average()
    return summary


def relay_row(s: dict[str, Any]) -> str:
    k, r = s["kefu"], s["rtpengine"] or {}
    return (
        f"| {s['streams']} | {s['seconds']:g} | {k['loop']} "
        f"| {k['relay_cpu_pct']:.1f} | {k['cpu_us_per_packet']:.1f} | {k['loss_pct']:.3f} "
        f"| {r.get('relay_cpu_pct', float('nan')):.1f} "
        f"| {r.get('cpu_us_per_packet', float('nan')):.1f} "
        f"| {r.get('loss_pct', float('nan')):.3f} | {s['cpu_ratio_kefu_over_rtpengine']} "
        f"| {' '.join(str(x) for x in s['load_average'])} |"
    )


RELAY_HEADER = (
    "| streams | seconds | kefu loop | kefu CPU % | kefu µs/packet | kefu loss % "
    "| rtpengine CPU % | rtpengine µs/packet | rtpengine loss % | ratio | load avg |\n"
    "|" + " --- |" * 11
)

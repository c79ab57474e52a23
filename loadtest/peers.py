"""Real SIP peers and a packet capture as child processes: SIPp, baresip, tshark.

Everything here starts a process in its own session and stops it by that PID (never by
name), and every temporary directory is removed on stop. The helpers only ever bind
127.0.0.1; tests that use them run inside a private network namespace
(``unshare -n sh -c 'ip link set lo up && ...'``).

SIPp 3.6.1 facts these helpers rely on (verified in tests/loadtest_tools):

* ``-sf`` must come before ``-set``: globals exist only once the scenario is loaded.
* ``play_pcap_audio`` sends from a raw socket (root or CAP_NET_RAW) with source port ``-mp``;
  a ``[keyword]`` attribute value is looked up in ``-key``.
* ``-rtp_echo`` reflects every datagram arriving on ``-mp`` (and ``-mp``+2) to its source.
* ``-trace_stat -stf F -fd 1`` writes ';'-separated cumulative counters, one row a second
  and one at exit; the last row's ``SuccessfulCall(C)``/``FailedCall(C)`` are the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import wave
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

SIPP_DIR = Path(__file__).resolve().parent / "sipp"
LOCALHOST = "127.0.0.1"


# --- processes -----------------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[bytes], first: signal.Signals, grace: float) -> None:
    """Signal the process group we created, then escalate to SIGKILL after ``grace``."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((first, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


# Ports for peer processes (SIPp, baresip, coturn, fake servers) come from a range that
# nothing else in a private network namespace uses: below kefu's RTP default (20000-29999,
# kefu/mediaserver/config.py) and the kernel's ephemeral range (net.ipv4.ip_local_port_range,
# 32768-60999 by default), so no ``:0`` bind can land there. Inside the namespace only the
# tests and their peers run, and the pool never hands a port out twice: a port it gives
# cannot be taken by anyone else between the test choosing it and the peer binding it.
PEER_PORTS = (12000, 19999)
"""Inclusive range :func:`take_ports` hands out (docs/TESTING.md, "Ports")."""
ANYWHERE_ENV = "KEFU_PEER_PORTS_ANYWHERE"
"""Set to 1 to let :func:`take_ports` work outside a private namespace (best effort)."""


_EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"


class PortsUnsafe(RuntimeError):
    """:func:`take_ports` cannot promise that nothing else takes the ports it hands out."""


def _only_loopback() -> bool:
    """Whether this network namespace has no interface but ``lo`` (``unshare -n``)."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return {line.split(":", 1)[0].strip() for line in lines} <= {"lo"}


def _range_safe(lo: int, hi: int) -> str | None:
    """Why ``lo..hi`` is not reserved for peers here, or None when it is."""
    from kefu.mediaserver.config import RtpConfig

    eph_lo, eph_hi = (int(x) for x in Path(_EPHEMERAL).read_text().split())
    rtp_lo, rtp_hi = RtpConfig().ports
    if lo <= eph_hi and eph_lo <= hi:
        return f"{lo}-{hi} overlaps the ephemeral range {eph_lo}-{eph_hi} ({_EPHEMERAL})"
    if lo <= rtp_hi and rtp_lo <= hi:
        return f"{lo}-{hi} overlaps kefu's default RTP ports {rtp_lo}-{rtp_hi}"
    if not _only_loopback():
        if os.environ.get(ANYWHERE_ENV) == "1":
            return None  # best effort (loadtest CLI on a shared host); bound ports are skipped
        return (
            "this network namespace has interfaces besides lo, so other programs may bind "
            "any port: run under unshare -n sh -c 'ip link set lo up && ...' "
            f"(scripts/test.sh), or set {ANYWHERE_ENV}=1 for a best-effort benchmark run"
        )
    return None


class PortPool:
    """Hands out ports of ``lo..hi`` in increasing order, never one twice, skipping any that
    something has bound; thread-safe. Use the process-wide pool through :func:`take_ports`."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self._next = lo
        self._lock = threading.Lock()
        self._checked = False

    def take(self, count: int = 1, *, even: bool = False) -> int:
        """The first of ``count`` consecutive ports (an even first one with ``even``: an RTP
        port and its RTCP port + 1, or a baresip ``rtp_ports`` block); raises
        :class:`PortsUnsafe` outside a private namespace, RuntimeError when exhausted."""
        with self._lock:
            if not self._checked:
                if why := _range_safe(self.lo, self.hi):
                    raise PortsUnsafe(why)
                self._checked = True
            while True:
                first = self._next + (self._next % 2 if even else 0)
                if first + count - 1 > self.hi:
                    raise RuntimeError(f"peer ports {self.lo}-{self.hi} are all handed out")
                self._next = first + count
                block = range(first, first + count)
                if not any(port_is_bound(p, t) for p in block for t in ("udp", "tcp")):
                    return first


# The one mutable module global (house rule 10 allows none): "never twice" must hold for the
# whole test process, across fixtures, threads and helper modules.
_POOL = PortPool(*PEER_PORTS)


def take_ports(count: int = 1, *, even: bool = False) -> int:
    """The first of ``count`` consecutive loopback ports (UDP and TCP) for a peer process,
    from :data:`PEER_PORTS`, that no other socket can take: see :class:`PortPool`."""
    return _POOL.take(count, even=even)


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except FileNotFoundError:
        return ""


def bound_socket_inodes(port: int, transport: str = "udp") -> set[str]:
    """The sockets in this network namespace bound to ``port`` (TCP: listening on it), as
    the ``socket:[INODE]`` names their file descriptors link to (proc(5) /proc/net/*)."""
    tables = ("tcp", "tcp6") if transport.startswith("t") else ("udp", "udp6")
    inodes = set()
    for table in tables:
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if int(local.rsplit(":", 1)[1], 16) == port and (table[0] == "u" or state == "0A"):
                inodes.add(f"socket:[{inode}]")
    return inodes


def port_is_bound(port: int, transport: str = "udp") -> bool:
    """Whether something in this network namespace has bound ``port`` (TCP: listens on it)."""
    return bool(bound_socket_inodes(port, transport))


def _wait_until(
    what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float
) -> None:
    # Readiness of an external process has no event to await, so poll briefly.
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout} s")
        time.sleep(0.02)


# --- SIPp ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SippResult:
    """What one SIPp run did."""

    returncode: int
    """0 all calls succeeded, 1 some failed, 97 internal exit, 99 no calls, 255/254 fatal."""
    successful: int
    """SuccessfulCall(C) of the last -trace_stat row."""
    failed: int
    """FailedCall(C) of the last -trace_stat row."""
    stats: list[dict[str, str]]
    """Every -trace_stat row, keyed by the CSV header."""
    stderr_tail: str
    """End of SIPp's stderr (fatal errors land here)."""
    errors: str = ""
    """End of the -trace_err log: unexpected messages, failed regexps, aborted calls."""
    screen: str = ""
    """The final statistics screens (-trace_screen)."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.failed == 0 and self.successful > 0

    def counter(self, name: str) -> int:
        """A cumulative counter of the last stats row, e.g. ``FailedTcpClosed(C)``."""
        if not self.stats:
            return 0
        value = self.stats[-1].get(name, "0") or "0"
        return int(float(value))


def resolve_scenario(scenario: str | Path) -> Path:
    """A path, or the name of a scenario in loadtest/sipp (with or without ``.xml``)."""
    path = Path(scenario)
    if path.exists():
        return path.resolve()
    name = path.name if path.suffix == ".xml" else f"{path.name}.xml"
    candidate = SIPP_DIR / name
    if not candidate.exists():
        raise FileNotFoundError(f"no SIPp scenario {scenario!r} (looked in {SIPP_DIR})")
    return candidate


def sipp_command(
    scenario: str | Path,
    target: str | None,
    workdir: Path,
    *,
    transport: str = "u1",
    calls: int | None = 1,
    rate: float | None = None,
    max_concurrent: int | None = None,
    local_ip: str = LOCALHOST,
    local_port: int | None = None,
    media_port: int | None = None,
    rtp_echo: bool = False,
    keys: Mapping[str, object] | None = None,
    variables: Mapping[str, object] | None = None,
    timeout: float | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argv for one SIPp run whose logs land in ``workdir``."""
    cmd = ["sipp"]
    if target:
        cmd.append(target)
    cmd += ["-sf", str(resolve_scenario(scenario))]  # before -set: see module docstring
    cmd += ["-t", transport, "-i", local_ip, "-mi", local_ip, "-nostdin"]
    if local_port is not None:
        cmd += ["-p", str(local_port)]
    if media_port is not None:
        cmd += ["-mp", str(media_port)]
    if rtp_echo:
        cmd.append("-rtp_echo")
    if calls is not None:
        cmd += ["-m", str(calls)]
    if rate is not None:
        cmd += ["-r", f"{rate:g}"]
    if max_concurrent is not None:
        cmd += ["-l", str(max_concurrent)]
    if timeout is not None:
        cmd += ["-timeout", f"{max(1, round(timeout))}s", "-timeout_error"]
    for k, v in (keys or {}).items():
        cmd += ["-key", k, str(v)]
    for k, v in (variables or {}).items():
        cmd += ["-set", k, str(v)]
    cmd += ["-trace_stat", "-stf", str(workdir / "stat.csv"), "-fd", "1"]
    cmd += ["-trace_err", "-error_file", str(workdir / "errors.log")]
    cmd += ["-trace_screen", "-screen_file", str(workdir / "screen.log")]
    cmd += list(extra)
    return cmd


def _parse_stats(path: Path) -> list[dict[str, str]]:
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f, delimiter=";"))
    except FileNotFoundError:
        return []
    if not rows:
        return []
    header = rows[0]
    return [dict(zip(header, row, strict=False)) for row in rows[1:] if row]


def spawn_sipp(cmd: Sequence[str], workdir: Path) -> subprocess.Popen[bytes]:
    """Start a :func:`sipp_command` argv in the background, its stderr into ``workdir``."""
    with open(workdir / "stderr.log", "wb") as err:
        return subprocess.Popen(
            cmd,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


def sipp_result(returncode: int, workdir: Path) -> SippResult:
    """What the SIPp run that logged into ``workdir`` (see :func:`sipp_command`) did."""
    stats = _parse_stats(workdir / "stat.csv")
    last = stats[-1] if stats else {}
    return SippResult(
        returncode=returncode,
        successful=int(float(last.get("SuccessfulCall(C)", "0") or 0)),
        failed=int(float(last.get("FailedCall(C)", "0") or 0)),
        stats=stats,
        stderr_tail=_tail(workdir / "stderr.log"),
        errors=_tail(workdir / "errors.log"),
        screen=_tail(workdir / "screen.log", 8000),
    )


def run_sipp(
    scenario: str | Path,
    target: str,
    *,
    transport: str = "u1",
    calls: int = 1,
    rate: float = 10.0,
    max_concurrent: int | None = None,
    local_port: int | None = None,
    media_port: int | None = None,
    timeout: float = 30.0,
    keys: Mapping[str, object] | None = None,
    variables: Mapping[str, object] | None = None,
    extra: Sequence[str] = (),
) -> SippResult:
    """Run a SIPp client to completion (blocking; see :func:`run_sipp_async` in event loops).

    ``keys`` become ``-key`` (e.g. ``{"pcap": path}``), ``variables`` become ``-set``
    (e.g. ``{"audio_ms": 3000}``). SIPp quits with a failure after ``timeout`` seconds.
    """
    with tempfile.TemporaryDirectory(prefix="kefu-sipp-") as tmp:
        workdir = Path(tmp)
        cmd = sipp_command(
            scenario,
            target,
            workdir,
            transport=transport,
            calls=calls,
            rate=rate,
            max_concurrent=max_concurrent,
            local_port=local_port,
            media_port=media_port,
            keys=keys,
            variables=variables,
            timeout=timeout,
            extra=extra,
        )
        proc = spawn_sipp(cmd, workdir)
        try:
            proc.wait(timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            stop_process(proc, signal.SIGTERM, 2.0)
        return sipp_result(proc.returncode, workdir)


async def run_sipp_async(
    scenario: str | Path,
    target: str,
    **kwargs: Any,
) -> SippResult:
    """:func:`run_sipp` in a worker thread, so an in-process kefu keeps serving meanwhile."""
    return await asyncio.to_thread(run_sipp, scenario, target, **kwargs)


@dataclass
class SippProcess:
    """A SIPp running in the background (usually a UAS); :meth:`stop` returns its result."""

    proc: subprocess.Popen[bytes]
    workdir: Path
    port: int
    media_port: int | None
    _result: SippResult | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> SippResult:
        """Wait for SIPp to exit by itself (``-m`` calls done); stop it if it does not."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.stop()

    def stop(self, grace: float = 3.0) -> SippResult:
        """SIGUSR1 (finish calls in progress, then exit), escalating; clean up; the result."""
        if self._result is None:
            stop_process(self.proc, signal.SIGUSR1, grace)
            self._result = sipp_result(self.proc.returncode, self.workdir)
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self._result

    def __enter__(self) -> SippProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sipp_media_port() -> int:
    """A ``-mp`` for SIPp from :func:`take_ports`: even, with the three ports above it
    reserved too (RTCP on +1; ``-rtp_echo`` and pcap play also use +2 and +3)."""
    return take_ports(4, even=True)


def start_sipp_uas(
    scenario: str | Path = "uas_kefu_mimic",
    *,
    port: int | None = None,
    transport: str = "u1",
    media_port: int | None = None,
    rtp_echo: bool = True,
    calls: int | None = None,
    variables: Mapping[str, object] | None = None,
    keys: Mapping[str, object] | None = None,
    ready_timeout: float = 5.0,
    extra: Sequence[str] = (),
) -> SippProcess:
    """Start a SIPp server on 127.0.0.1:``port`` and return once its SIP port is bound.

    ``port`` and ``media_port`` default to ports from :func:`take_ports` and
    :func:`sipp_media_port`.

    ``variables={"mode": "refer"}`` selects the behaviour of uas_kefu_mimic.xml; with
    ``calls`` SIPp exits by itself after that many calls.
    """
    if port is None:
        port = take_ports()
    if media_port is None:
        media_port = sipp_media_port()
    workdir = Path(tempfile.mkdtemp(prefix="kefu-sipp-uas-"))
    cmd = sipp_command(
        scenario,
        None,
        workdir,
        transport=transport,
        calls=calls,
        local_port=port,
        media_port=media_port,
        rtp_echo=rtp_echo,
        keys=keys,
        variables=variables,
        extra=extra,
    )
    proc = spawn_sipp(cmd, workdir)
    uas = SippProcess(proc, workdir, port, media_port)
    try:
        _wait_until(
            f"SIPp UAS on {port}", lambda: port_is_bound(port, transport), proc, ready_timeout
        )
    except Exception:
        result = uas.stop()
        raise RuntimeError(f"SIPp UAS failed to start: {result.stderr_tail}") from None
    return uas


# --- tshark --------------------------------------------------------------------------------


class TsharkCapture:
    """Capture UDP on an interface into a classic pcap for :mod:`loadtest.rtpcap`.

    Entering returns once tshark reports "Capturing on" (so no packet of the test is
    missed); leaving interrupts it (SIGINT flushes the file) and waits for it to exit.
    ``path`` defaults to a temporary file removed with :meth:`cleanup`.
    """

    def __init__(
        self,
        interface: str = "lo",
        ports: Sequence[int] | None = None,
        path: str | Path | None = None,
        *,
        capture_filter: str | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self._tmpdir = Path(tempfile.mkdtemp(prefix="kefu-tshark-"))
        self.path = Path(path) if path is not None else self._tmpdir / "capture.pcap"
        if capture_filter is None:
            capture_filter = "udp"
            if ports:
                capture_filter += " and (" + " or ".join(f"port {p}" for p in ports) + ")"
        self.capture_filter = capture_filter
        self.interface = interface
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self.stderr = ""

    def start(self) -> TsharkCapture:
        stderr_path = self._tmpdir / "stderr.log"
        cmd = [
            "tshark",
            "-i",
            self.interface,
            "-f",
            self.capture_filter,
            "-w",
            str(self.path),
            "-F",
            "pcap",
            "-q",
        ]
        with open(stderr_path, "wb") as err:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            _wait_until(
                "tshark",
                lambda: "Capturing on" in _tail(stderr_path),
                self._proc,
                self.start_timeout,
            )
        except Exception:
            self.stop()
            raise RuntimeError(f"tshark did not start: {self.stderr}") from None
        return self

    def stop(self) -> Path:
        """Stop capturing; returns the capture file."""
        if self._proc is not None:
            stop_process(self._proc, signal.SIGINT, 5.0)
            self._proc = None
            self.stderr = _tail(self._tmpdir / "stderr.log")
        return self.path

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> TsharkCapture:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> TsharkCapture:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)


# --- baresip -------------------------------------------------------------------------------

_BARESIP_CONFIG = """\
poll_method\t\tepoll
sip_listen\t\t{ip}:{sip_port}
sip_transports\t\t{transports}
net_interface\t\t{ip}
audio_player\t\t
audio_source\t\taufile,{source}
audio_alert\t\t
audio_srate\t\t8000
audio_channels\t\t1
rtp_ports\t\t{rtp_lo}-{rtp_hi}
module_path\t\t/usr/lib/baresip/modules
module\t\t\taufile.so
module\t\t\tg711.so
module\t\t\tsndfile.so
snd_path\t\t{record_dir}
module_app\t\taccount.so
module_app\t\tmenu.so
{extra}"""


@dataclass
class BaresipProcess:
    """A headless baresip placing one call."""

    proc: subprocess.Popen[bytes]
    home: Path
    record_dir: Path
    _log: str = field(default="", repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> int:
        """Wait for baresip to quit by itself (``-t``); stop it if it does not."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return self.proc.returncode

    async def wait_async(self, limit_s: float) -> int:
        """:meth:`wait` in a worker thread, for tests whose event loop runs kefu."""
        return await asyncio.to_thread(self.wait, limit_s)

    @property
    def log(self) -> str:
        """baresip's console output (call progress, codec choice, errors)."""
        return self._log or _tail(self.home / "baresip.log", 20000)

    def recordings(self) -> dict[str, Path]:
        """sndfile's WAVs: ``enc`` (what baresip sent) and ``dec`` (what it received)."""
        out: dict[str, Path] = {}
        for wav in sorted(self.record_dir.glob("dump-*.wav")):
            out["enc" if wav.stem.endswith("-enc") else "dec"] = wav
        return out

    def stop(self) -> None:
        """SIGTERM (baresip hangs up its calls on the way out), escalating; keeps the log."""
        stop_process(self.proc, signal.SIGTERM, 3.0)
        self._log = _tail(self.home / "baresip.log", 20000)

    def cleanup(self) -> None:
        """Stop and delete the temporary HOME, config and recordings."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> BaresipProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def baresip_rtp_ports(pairs: int = 4) -> tuple[int, int]:
    """An even-aligned ``rtp_ports`` range of ``pairs`` RTP/RTCP pairs from :func:`take_ports`.

    baresip (1.0) rounds the low end up to even and may use the port just above the high end
    (its RTCP), so the block reserved is ``lo .. hi + 1`` and every port baresip can pick lies
    inside it.
    """
    lo = take_ports(2 * pairs + 2, even=True)
    return lo, lo + 2 * pairs


def start_baresip(
    uri: str,
    audio_wav: str | Path,
    *,
    hangup_after: float | None = None,
    sip_port: int | None = None,
    rtp_ports: tuple[int, int] | None = None,
    ip: str = LOCALHOST,
    tls_ca: str | Path | None = None,
    tls_cert: tuple[str | Path, str | Path] | None = None,
    mediaenc: str | None = None,
) -> BaresipProcess:
    """Start baresip in a temporary HOME and dial ``uri`` (add ``;transport=tcp`` for TCP,
    ``;transport=tls`` for TLS).

    The caller's audio is ``audio_wav`` (mono 16-bit 8 kHz, read by the aufile module);
    baresip hangs up when the file ends, or when it quits after ``hangup_after`` seconds
    (``-t``, whole seconds), whichever is first; without ``hangup_after`` it quits a second
    after the file ends. ``sip_port`` and ``rtp_ports`` default to ports from
    :func:`take_ports` (see :func:`baresip_rtp_ports`). Only G.711 is loaded, so the offer
    is PCMU + PCMA. Both directions are recorded by the sndfile module
    (:meth:`BaresipProcess.recordings`).

    TLS: ``tls_ca`` (``sip_cafile``) and/or ``tls_cert`` (certificate and key, joined into the
    one PEM file ``sip_certificate`` wants: the client certificate baresip presents) add the
    ``tls`` transport. baresip 1.0 listens for TLS on ``sip_port`` + 1, so two ports are
    taken; it loads ``sip_cafile`` but does not check the server's certificate against it
    (libre 1.1 never asks OpenSSL to verify), so only the server side of a handshake
    verifies anything. ``mediaenc`` (``srtp``, ``srtp-mand``, ``srtp-mandf``: SDES, RFC 4568)
    loads the srtp module and sets the account's media encryption.
    """
    tls = tls_ca is not None or tls_cert is not None
    sip_port = take_ports(2 if tls else 1) if sip_port is None else sip_port
    rtp_ports = baresip_rtp_ports() if rtp_ports is None else rtp_ports
    home = Path(tempfile.mkdtemp(prefix="kefu-baresip-"))
    conf = home / ".baresip"
    record_dir = home / "rec"
    conf.mkdir()
    record_dir.mkdir()
    extra = ""
    if tls_ca is not None:
        extra += f"sip_cafile\t\t{Path(tls_ca).resolve()}\n"
    if tls_cert is not None:
        bundle = conf / "client.pem"
        bundle.write_text(Path(tls_cert[0]).read_text() + Path(tls_cert[1]).read_text())
        extra += f"sip_certificate\t\t{bundle}\n"
    account = f"<sip:caller@{ip}>;regint=0"
    if mediaenc is not None:
        extra += "module\t\t\tsrtp.so\n"
        account += f";mediaenc={mediaenc}"
    (conf / "config").write_text(
        _BARESIP_CONFIG.format(
            ip=ip,
            sip_port=sip_port,
            transports="udp,tcp,tls" if tls else "udp,tcp",
            source=Path(audio_wav).resolve(),
            rtp_lo=rtp_ports[0],
            rtp_hi=rtp_ports[1],
            record_dir=record_dir,
            extra=extra,
        )
    )
    (conf / "accounts").write_text(account + "\n")
    (conf / "contacts").write_text("")
    cmd = ["baresip", "-f", str(conf), "-e", f"/dial {uri}"]
    if hangup_after is None:
        # baresip stays up after the call ends at end of file: let it quit a second later
        with wave.open(str(audio_wav), "rb") as w:
            hangup_after = w.getnframes() / w.getframerate() + 1
    cmd += ["-t", str(max(1, math.ceil(hangup_after)))]
    env = {**os.environ, "HOME": str(home)}
    with open(home / "baresip.log", "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return BaresipProcess(proc, home, record_dir)

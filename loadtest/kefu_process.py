"""``kefu serve`` as a child process, for tests and benchmarks, and /proc readings of it.

:func:`start_kefu` is the one way to start kefu from outside: it takes the ports kefu
actually bound from its ``kefu_started`` log line (so ``:0`` listeners work), waits for
``/readyz`` (AI models load after the ports open) and returns a :class:`KefuProcess`, which
reads the JSON log and ``/metrics`` and stops the process by its PID.

kefu runs in its own session so that :meth:`KefuProcess.stop` can signal its process group
without touching anything else; everything binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.peers import stop_process

__all__ = [
    "CpuSample",
    "KefuProcess",
    "cpu_percent",
    "cpu_seconds",
    "load_average",
    "process_tree",
    "read_json_log",
    "rss_kib",
    "sample_cpu",
    "start_kefu",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- /proc readings ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads together (proc(5) stat)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first (proc(5) /proc/PID/task/TID/children):
    kefu's room workers are its children."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        out.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


def rss_kib(pid: int) -> int:
    """Resident set size in KiB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@dataclass(frozen=True, slots=True)
class CpuSample:
    """CPU seconds of some processes at one wall-clock instant."""

    wall: float
    """time.monotonic() when read."""
    cpu: dict[str, float]
    """Process label -> cumulative CPU seconds."""


def sample_cpu(pids: dict[str, int]) -> CpuSample:
    cpu = {}
    for label, pid in pids.items():
        try:
            cpu[label] = cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            cpu[label] = float("nan")
    return CpuSample(time.monotonic(), cpu)


def cpu_percent(a: CpuSample, b: CpuSample, label: str) -> float:
    """CPU used between two samples, as % of one core."""
    span = b.wall - a.wall
    return 100.0 * (b.cpu[label] - a.cpu[label]) / span if span > 0 else float("nan")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- kefu as a child process ---------------------------------------------------------------


def read_json_log(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of a log file; other lines (tracebacks, partial writes) are skipped."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


@dataclass
class KefuProcess:
    """A ``kefu serve`` child process, its JSON log and the ports it bound."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    sip_host: str
    sip_port: int
    http_port: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def sip(self) -> str:
        return f"{self.sip_host}:{self.sip_port}"

    @property
    def http(self) -> str:
        return f"http://{self.sip_host}:{self.http_port}"

    def log_lines(self) -> list[dict[str, Any]]:
        return read_json_log(self.log_path)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The log lines whose ``event`` is ``name`` (all of them for None)."""
        return [e for e in self.log_lines() if name is None or e.get("event") == name]

    def wait_event(self, name: str, timeout: float = 15.0) -> dict[str, Any]:
        """The first log line whose ``event`` is ``name``, once kefu has written it.

        A generous deadline instead of a fixed sleep: kefu logs as it acts, so a loaded CI
        box only makes this return later. (The log is a file with no change event to await,
        so it is re-read every 20 ms.)
        """
        deadline = time.monotonic() + timeout
        while not (found := self.events(name)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kefu exited before logging {name!r}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"kefu did not log {name!r} within {timeout} s")
            time.sleep(0.02)
        return found[0]

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.http}/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def metric(self, name: str, labels: str = "", default: float = 0.0) -> float:
        """One sample of ``/metrics`` (``labels`` as written there); ``default`` if absent."""
        key = f"{name}{{{labels}}}" if labels else name
        for line in self.metrics().splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return default

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """``sig`` (SIGTERM: kefu drains), escalating to SIGKILL; the exit status."""
        stop_process(self.proc, sig, timeout)
        return self.proc.returncode

    def log_tail(self, limit: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-limit:]


def start_kefu(
    workdir: Path,
    *args: str,
    sip_listen: str = "127.0.0.1:0",
    http_listen: str = "127.0.0.1:0",
    rtp_ports: str = "31000-31999",
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    start_timeout: float = 20.0,
    ready_timeout: float = 240.0,
) -> KefuProcess:
    """Start ``kefu serve`` with ``args`` and return once ``/readyz`` answers.

    ``env`` is laid over this process's environment; without a ``KEFU_AI_LANGUAGE`` there,
    the server is English-only (no Mandarin models loaded: tests and English benchmarks
    start faster and lighter). Raises RuntimeError (with the end of
    kefu's log) when kefu exits, does not log ``kefu_started`` within ``start_timeout`` or
    is not ready ``ready_timeout`` seconds later; kefu is stopped first.
    """
    log_path = log_path or workdir / f"kefu-{time.monotonic_ns()}.log"
    cmd = [
        sys.executable,
        "-m",
        "kefu.mediaserver.cli",
        "serve",
        "--sip-listen",
        sip_listen,
        "--http-listen",
        http_listen,
        "--rtp-ports",
        rtp_ports,
        *args,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={"KEFU_AI_LANGUAGE": "en", **os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        server = _wait_started(proc, log_path, time.monotonic() + start_timeout)
        _wait_ready(server, time.monotonic() + ready_timeout)
    except BaseException:
        stop_process(proc, signal.SIGKILL, 5.0)
        raise
    return server


def _wait_started(proc: subprocess.Popen[bytes], log_path: Path, deadline: float) -> KefuProcess:
    # Startup has no event we can await from outside the process: poll the log.
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"kefu exited early: {log_path.read_text()[-3000:]}")
        for entry in read_json_log(log_path):
            if entry.get("event") == "kefu_started":
                host, _, sip_port = str(entry["sip"]).rpartition(":")
                http_port = str(entry["http"]).rpartition(":")[2]
                return KefuProcess(proc, log_path, host, int(sip_port), int(http_port))
        time.sleep(0.05)
    raise RuntimeError(f"kefu did not start: {log_path.read_text()[-3000:]}")


def _wait_ready(server: KefuProcess, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{server.http}/readyz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            if server.proc.poll() is not None:
                raise RuntimeError(f"kefu exited: {server.log_tail()}") from None
            time.sleep(0.2)
    raise RuntimeError(f"kefu never became ready: {server.log_tail()}")

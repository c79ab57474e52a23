"""Shared fixtures: a real ``kefu serve`` process, and the network-namespace guard.

Tests that open sockets towards peers are marked ``netns``; they run only inside the private
network namespace that ``scripts/test.sh`` creates (KEFU_NETNS=1), so nothing they do can
leave the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_NETNS = os.environ.get("KEFU_NETNS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IN_NETNS:
        return
    skip = pytest.mark.skip(reason="needs a private network namespace (run scripts/test.sh)")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


@dataclass
class KefuProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    sip_host: str
    sip_port: int
    http_port: int

    @property
    def sip(self) -> str:
        return f"{self.sip_host}:{self.sip_port}"

    @property
    def http(self) -> str:
        return f"http://{self.sip_host}:{self.http_port}"

    def log_lines(self) -> list[dict[str, object]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def events(self, name: str) -> list[dict[str, object]]:
        return [e for e in self.log_lines() if e.get("event") == name]

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"{self.http}/metrics", timeout=5) as resp:
            return resp.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        key = f"{name}{{{labels}}}" if labels else name
        for line in self.metrics().splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return 0.0

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_kefu(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> KefuProcess:
    log_path = tmp_path / f"kefu-{time.monotonic_ns()}.log"
    log = log_path.open("wb")
    cmd = [
        sys.executable,
        "-m",
        "kefu.mediaserver.cli",
        "serve",
        "--sip-listen",
        "127.0.0.1:0",
        "--http-listen",
        "127.0.0.1:0",
        "--rtp-ports",
        "31000-31999",
        *args,
    ]
    defaults = {
        "KEFU_CALLS_MEDIA_MODE": "echo",
        "KEFU_CALLS_DRAIN_TIMEOUT": "2",
        "KEFU_SERVER_STATE_DIR": str(tmp_path / "state"),
    }
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **defaults, **(env or {})}
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"kefu exited early: {log_path.read_text()[-3000:]}")
        for line in log_path.read_text(errors="replace").splitlines():
            if '"kefu_started"' in line:
                started = json.loads(line)
                host, _, sip_port = str(started["sip"]).rpartition(":")
                http_port = str(started["http"]).rpartition(":")[2]
                server = KefuProcess(proc, log_path, host, int(sip_port), int(http_port))
                _wait_ready(server, deadline + 100)
                return server
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"kefu did not start: {log_path.read_text()[-3000:]}")


def _wait_ready(server: KefuProcess, deadline: float) -> None:
    """Until /readyz says ready (AI models load after the ports open)."""
    import urllib.error
    import urllib.request

    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{server.http}/readyz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            if server.proc.poll() is not None:
                raise RuntimeError(f"kefu exited: {server.log_path.read_text()[-3000:]}") from None
            time.sleep(0.2)
    raise RuntimeError(f"kefu never became ready: {server.log_path.read_text()[-3000:]}")


@pytest.fixture
def kefu(tmp_path: Path) -> Iterator[KefuProcess]:
    server = start_kefu(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def kefu_factory(tmp_path: Path) -> Iterator[object]:
    started: list[KefuProcess] = []

    def factory(*args: str, env: dict[str, str] | None = None) -> KefuProcess:
        server = start_kefu(tmp_path, *args, env=env)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()

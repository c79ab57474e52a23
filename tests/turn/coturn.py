"""Start Debian's coturn (``turnserver``) on loopback for the TURN tests.

Flags as in /work/shared/FIELD-NOTES.md: TURN REST auth (``use-auth-secret`` +
``static-auth-secret``), no TLS/DTLS, its own relay port range, loopback peers allowed (kefu
and the clients all live on 127.0.0.1 inside the test's network namespace).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadtest.peers import take_ports

TURNSERVER = shutil.which("turnserver") or "/usr/bin/turnserver"
RELAY_PORTS = 40
"""How many relay ports coturn gets (one allocation each)."""


@dataclass
class Coturn:
    port: int
    secret: str
    realm: str
    log_path: Path

    @property
    def url(self) -> str:
        return f"turn:127.0.0.1:{self.port}?transport=udp"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _answers_stun(port: int) -> bool:
    """One STUN Binding request (RFC 5389 section 6): coturn answers once it listens."""
    request = struct.pack("!HHI", 0x0001, 0, 0x2112A442) + os.urandom(12)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        s.sendto(request, ("127.0.0.1", port))
        try:
            data = s.recv(2048)
        except OSError:
            return False
    return data[8:20] == request[8:20]


@contextmanager
def coturn(tmp_path: Path, secret: str, realm: str = "kefu") -> Iterator[Coturn]:
    if not Path(TURNSERVER).exists():
        pytest.skip("coturn is not installed (apt-get install coturn)")
    # Its listening port and its relay range come from the reserved peer ports: a relay
    # range in the ephemeral range (where it was) can meet any socket bound to :0.
    port = take_ports(2)  # coturn also binds the next one (its RFC 5780 alt-listening-port)
    relay_lo = take_ports(RELAY_PORTS, even=True)
    log_path = tmp_path / "coturn.log"
    cmd = [
        TURNSERVER, "-n", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1",
        f"--listening-port={port}", "--use-auth-secret", f"--static-auth-secret={secret}",
        f"--realm={realm}", "--no-tls", "--no-dtls",
        f"--min-port={relay_lo}", f"--max-port={relay_lo + RELAY_PORTS - 1}",
        "--allow-loopback-peers", "--no-cli", "--log-file=stdout", "--simple-log",
        f"--pidfile={tmp_path / 'turnserver.pid'}", f"--db={tmp_path / 'turndb'}",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30  # generous: a loaded CI box starts it slowly
        while not _answers_stun(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"turnserver did not start: {log_path.read_text()[-2000:]}")
        yield Coturn(port, secret, realm, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

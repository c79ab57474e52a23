"""A private ``redis-server`` for tests, benchmarks and the local cluster.

It listens on a Unix socket in its directory only (``--port 0``: no TCP port to take or to
collide on), keeps nothing on disk, and runs in its own session so that :meth:`RedisPeer.stop`
signals only it. :meth:`RedisPeer.restart` starts it again on the same socket (a Redis lost
and back).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from loadtest.peers import _wait_until, stop_process

__all__ = ["RedisPeer", "redis_missing", "start_redis"]

UNIX_PATH_MAX = 107
"""The longest path a Unix socket may have (sun_path, less its terminating NUL)."""


def redis_missing() -> str | None:
    """Why a private Redis cannot run here (None: it can)."""
    return None if shutil.which("redis-server") else "redis-server is not installed"


def _answers(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            s.connect(str(path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass(eq=False)
class RedisPeer:
    directory: Path
    proc: subprocess.Popen[bytes]

    @property
    def socket_path(self) -> Path:
        return self.directory / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        stop_process(self.proc, signal.SIGTERM, grace)

    def restart(self) -> None:
        """Start again on the same socket (after :meth:`stop`)."""
        self.stop()
        self.proc = _spawn(self.directory)


def _spawn(directory: Path) -> subprocess.Popen[bytes]:
    sock = directory / "redis.sock"
    if len(str(sock)) > UNIX_PATH_MAX:
        raise RuntimeError(f"redis-server: socket path too long for a Unix socket: {sock}")
    sock.unlink(missing_ok=True)
    log = open(directory / "redis.log", "ab")  # noqa: SIM115 - the child keeps it open
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port", "0",
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(directory),
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    try:
        _wait_until("redis-server", lambda: _answers(sock), proc, 10.0)
    except (RuntimeError, TimeoutError):
        stop_process(proc, signal.SIGKILL, 1.0)
        tail = (directory / "redis.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"redis-server did not start:\n{tail}") from None
    return proc


def start_redis(directory: Path) -> RedisPeer:
    """A running private Redis in ``directory`` (created if needed); RuntimeError naming the
    problem when it cannot start."""
    missing = redis_missing()
    if missing:
        raise RuntimeError(f"{missing} (apt-get install redis-server)")
    directory.mkdir(parents=True, exist_ok=True)
    return RedisPeer(directory, _spawn(directory))

"""What :mod:`loadtest.cluster` keeps about its processes (Redis is
:mod:`loadtest.redis_peer`): the recorded state that lets ``status`` and ``stop`` find them
again from another process.

A recorded PID is trusted only while the process's start time (proc(5) stat field 22) still
matches the one recorded: a PID reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loadtest.kamailio import KamailioError, dispatcher_state
from loadtest.peers import PortsUnsafe, take_ports


class ProcessError(RuntimeError):
    """A helper process did not start; the message names it and ends with its log."""


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except FileNotFoundError:
        return ""


# --- small helpers ---------------------------------------------------------------------------


def write_secret(path: Path, fresh: str) -> str:
    """The secret kept in ``path`` (mode 0600), or ``fresh`` written there when it has none:
    a restarted cluster keeps accepting the tokens made for it."""
    with contextlib.suppress(FileNotFoundError):
        kept = path.read_text().strip()
        if kept:
            path.chmod(0o600)
            return kept
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(fresh + "\n")
    path.chmod(0o600)
    return fresh


def metric(base_url: str, name: str, labels: str = "", default: float = 0.0) -> float:
    """One sample of ``base_url/metrics`` (``labels`` as written there)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return default


def free_port(host: str = "127.0.0.1") -> int:
    """A port free for UDP and TCP right now (bound and released): outside a private network
    namespace only; the caller must cope with losing it (Kamailio then fails to bind)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind((host, 0))
            port = int(udp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind((host, port))
                except OSError:
                    continue
                return port


def front_ports(sip_port: int | None, attempts: int = 5) -> Iterator[int]:
    """Kamailio's SIP port: ``sip_port``; else one from the peer pool (docs/TESTING.md,
    "Ports"); outside a private namespace a fresh free port per attempt."""
    if sip_port is not None:
        yield sip_port
        return
    for _ in range(attempts):
        try:
            yield take_ports()
        except PortsUnsafe:
            yield free_port()


# --- recorded processes ----------------------------------------------------------------------


def proc_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks after boot; None if there is no such process or
    it is a zombie (it has exited)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def alive(pid: int, start: int | None) -> bool:
    now = proc_start(pid)
    return now is not None and (start is None or now == start)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """``sig`` to the process group ``pid`` leads (a session started here), else to ``pid``."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_pid(pid: int, start: int | None, grace: float) -> bool:
    """SIGTERM, then SIGKILL after ``grace``, to a recorded process that is not our child;
    whether it is gone."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not alive(pid, start):
            return True
        signal_group(pid, sig)
        deadline = time.monotonic() + wait_s
        # not our child: there is no exit to wait on, only /proc to look at
        while alive(pid, start) and time.monotonic() < deadline:
            time.sleep(0.05)
    return not alive(pid, start)


def write_state(path: Path, info: dict[str, Any], **extra: Any) -> None:
    pids = [info["kamailio_pid"], info["redis_pid"], *(n["pid"] for n in info["nodes"])]
    state = {**info, **extra, "pid_starts": {str(p): proc_start(p) for p in pids}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(path)


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state


def _start_of(state: dict[str, Any], pid: int) -> int | None:
    value = state.get("pid_starts", {}).get(str(pid))
    return int(value) if value is not None else None


def live_state(path: Path) -> bool:
    """Whether ``path`` records a cluster with any process still running."""
    state = read_state(path)
    if state is None:
        return False
    pids = [state["kamailio_pid"], state["redis_pid"], *(n["pid"] for n in state["nodes"])]
    return any(alive(p, _start_of(state, p)) for p in pids)


def status_report(state: dict[str, Any], ctl_path: Path) -> dict[str, Any]:
    """The recorded JSON with ``alive`` for every process and the dispatcher's flags."""
    report = {k: v for k, v in state.items() if k != "pid_starts"}
    report["kamailio_alive"] = alive(state["kamailio_pid"], _start_of(state, state["kamailio_pid"]))
    report["redis_alive"] = alive(state["redis_pid"], _start_of(state, state["redis_pid"]))
    flags: dict[str, str] = {}
    if report["kamailio_alive"]:
        with contextlib.suppress(KamailioError, subprocess.TimeoutExpired):
            flags = {
                u.removeprefix("sip:"): f for u, f in dispatcher_state(f"unix:{ctl_path}").items()
            }
    report["dispatcher"] = flags
    nodes = []
    for node in state["nodes"]:
        up = alive(node["pid"], _start_of(state, node["pid"]))
        nodes.append({**node, "alive": up, "dispatcher": flags.get(node["sip"])})
    report["nodes"] = nodes
    report["alive"] = (
        report["kamailio_alive"] and report["redis_alive"] and all(n["alive"] for n in nodes)
    )
    return report


def stop_recorded(state: dict[str, Any], grace: float) -> bool:
    """Stop the recorded nodes, then Kamailio, then Redis; whether all are gone."""
    ok = True
    for node in state["nodes"]:
        ok &= stop_pid(node["pid"], _start_of(state, node["pid"]), grace)
    for key in ("kamailio_pid", "redis_pid"):
        ok &= stop_pid(state[key], _start_of(state, state[key]), grace)
    return ok

"""Kamailio (deploy/kamailio/kamailio.cfg) as a child process, and its dispatcher state.

:func:`start_kamailio` runs the repository's configuration in the foreground (``-DD -E``,
its own session, small memory, two children) with the listen port, dispatcher list and ctl
socket given as ``-A`` defines, and returns once Kamailio has bound its SIP port and answers
on the ctl socket. :func:`dispatcher_state` reads ``kamcmd dispatcher.list``: each
destination's flags, e.g. ``AP`` (active, probed) or ``IP`` (inactive, probed).

Everything binds 127.0.0.1 unless told otherwise; tests run it inside ``unshare -n``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtest.kefu_process import process_tree
from loadtest.peers import bound_socket_inodes, stop_process

__all__ = [
    "KAMAILIO_CFG",
    "KamailioError",
    "KamailioProcess",
    "dispatcher_state",
    "find_binary",
    "is_active",
    "kamailio_command",
    "kamcmd",
    "parse_dispatcher_list",
    "start_kamailio",
    "write_dispatcher_list",
]

KAMAILIO_CFG = Path(__file__).resolve().parents[1] / "deploy" / "kamailio" / "kamailio.cfg"
DISPATCHER_SET = 1
"""The dispatcher set of the kefu nodes in kamailio.cfg."""
FLAG_INACTIVE_PROBING = 9
"""List-file flags of a destination that enters rotation only once it has answered a probe
(1 inactive + 8 probing)."""
_DEST = re.compile(r"URI:\s*(\S+)\s+FLAGS:\s*(\S+)")


SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
"""Where Debian puts kamailio and kamcmd: not on a user's PATH."""


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in the sbin directories."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


class KamailioError(RuntimeError):
    """Kamailio did not start or its ctl socket did not answer."""


def write_dispatcher_list(
    path: Path, destinations: Sequence[str], *, active: Collection[str] = ()
) -> None:
    """Write set :data:`DISPATCHER_SET` with one line per destination (``HOST:PORT`` or a SIP
    URI), atomically (Kamailio may be reloading it). Those in ``active`` start active; the
    others only once they have answered a probe (flags :data:`FLAG_INACTIVE_PROBING`)."""
    lines = ["# setid destination flags priority (written by loadtest.kamailio)"]
    active_uris = {_uri(a) for a in active}
    for dest in destinations:
        uri = _uri(dest)
        flags = 0 if uri in active_uris else FLAG_INACTIVE_PROBING
        lines.append(f"{DISPATCHER_SET} {uri} {flags} 0")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def _uri(dest: str) -> str:
    return dest if dest.startswith("sip:") else f"sip:{dest}"


def kamcmd(ctl: str, *args: str, timeout: float = 5.0) -> str:
    """One RPC over Kamailio's ctl socket (``unix:PATH``); its text output."""
    done = subprocess.run(
        [find_binary("kamcmd") or "kamcmd", "-s", ctl, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise KamailioError(f"kamcmd {' '.join(args)}: {done.stderr.strip() or done.stdout}")
    return done.stdout


def parse_dispatcher_list(text: str) -> dict[str, str]:
    """Destination URI -> dispatcher flags from ``kamcmd dispatcher.list`` output (``AP``,
    ``IP``, ``TP``, ``DX`` ...): the first letter is the state (Active, Inactive, Trying,
    Disabled), P means probed."""
    return dict(_DEST.findall(text))


def dispatcher_state(ctl: str) -> dict[str, str]:
    """:func:`parse_dispatcher_list` of the running Kamailio behind ``ctl``."""
    return parse_dispatcher_list(kamcmd(ctl, "dispatcher.list"))


def is_active(flags: str | None) -> bool:
    return bool(flags) and str(flags).startswith("A")


@dataclass
class KamailioProcess:
    """A running Kamailio: its process, SIP address, ctl socket and log."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    ctl: str
    log_path: Path
    ds_list: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def sip(self) -> str:
        return f"{self.host}:{self.port}"

    def dispatcher_state(self) -> dict[str, str]:
        return dispatcher_state(self.ctl)

    def reload(self, destinations: Sequence[str], *, active: Collection[str] = ()) -> None:
        """Replace set 1 with ``destinations`` (``dispatcher.reload``). A reload resets every
        destination to the flags in the list: the ones active now (and those in ``active``)
        are written active, so that the reload does not take them out of rotation."""
        now = {uri for uri, flags in self.dispatcher_state().items() if is_active(flags)}
        write_dispatcher_list(self.ds_list, destinations, active={*now, *active})
        kamcmd(self.ctl, "dispatcher.reload")

    def wait_dispatcher(
        self, ready: Callable[[dict[str, str]], bool], timeout: float, what: str = ""
    ) -> dict[str, str]:
        """Poll ``dispatcher.list`` until ``ready(state)``; the state. The dispatcher has no
        change event a client can await: its state is read every 50 ms."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.dispatcher_state()
            if ready(state):
                return state
            if self.proc.poll() is not None:
                raise KamailioError(f"kamailio exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"dispatcher not {what or 'ready'} in {timeout} s: {state}")
            time.sleep(0.05)

    def stop(self, grace: float = 5.0) -> int | None:
        stop_process(self.proc, signal.SIGTERM, grace)
        return self.proc.returncode

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except FileNotFoundError:
            return ""


def kamailio_command(
    rundir: Path,
    *,
    host: str,
    port: int,
    ds_list: Path,
    ctl: str,
    children: int = 2,
    ping_interval: int = 1,
    defines: Mapping[str, str | int] | None = None,
    cfg: Path = KAMAILIO_CFG,
) -> list[str]:
    """The argv of Kamailio in the foreground with ``cfg`` and these defines (``-A``)."""
    values: dict[str, str | int] = {
        "SIP_IP": host,
        "SIP_PORT": port,
        "CHILDREN": children,
        "DS_PING_INTERVAL": ping_interval,
        "DS_LIST": f'"{ds_list}"',
        "CTL_SOCKET": f'"{ctl}"',
        **(defines or {}),
    }
    binary = find_binary("kamailio") or "kamailio"
    cmd = [binary, "-f", str(cfg), "-DD", "-E", "-m", "64", "-M", "8", "-Y", str(rundir)]
    for name, value in values.items():
        cmd += ["-A", f"{name}={value}"]
    return cmd


def start_kamailio(
    rundir: Path,
    port: int,
    destinations: Sequence[str],
    *,
    host: str = "127.0.0.1",
    children: int = 2,
    ping_interval: int = 1,
    defines: Mapping[str, str | int] | None = None,
    start_timeout: float = 15.0,
) -> KamailioProcess:
    """Start Kamailio on ``host:port`` (UDP and TCP) in front of ``destinations``; return once
    its port is bound and its ctl socket answers. Raises :class:`KamailioError` with the end of
    its log (``rundir/kamailio.log``) when it exits or does not come up; it is stopped first."""
    if find_binary("kamailio") is None or find_binary("kamcmd") is None:
        raise KamailioError("kamailio is not installed (apt-get install kamailio)")
    rundir.mkdir(parents=True, exist_ok=True)
    ds_list = rundir / "dispatcher.list"
    write_dispatcher_list(ds_list, destinations)
    ctl = f"unix:{rundir / 'kamailio.ctl'}"
    log_path = rundir / "kamailio.log"
    cmd = kamailio_command(
        rundir,
        host=host,
        port=port,
        ds_list=ds_list,
        ctl=ctl,
        children=children,
        ping_interval=ping_interval,
        defines=defines,
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=rundir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    kam = KamailioProcess(proc, host, port, ctl, log_path, ds_list)
    try:
        _wait_up(kam, time.monotonic() + start_timeout)
    except BaseException:
        stop_process(proc, signal.SIGKILL, 5.0)
        raise
    return kam


def _wait_up(kam: KamailioProcess, deadline: float) -> None:
    # Kamailio signals readiness to no one: poll its port and its ctl socket.
    while time.monotonic() < deadline:
        if kam.proc.poll() is not None:
            raise KamailioError(f"kamailio exited with {kam.proc.returncode}: {kam.log_tail()}")
        if _owns_port(kam.pid, kam.port, "udp") and _owns_port(kam.pid, kam.port, "tcp"):
            try:
                kam.dispatcher_state()
                return
            except (KamailioError, subprocess.TimeoutExpired):
                pass
        time.sleep(0.05)
    raise KamailioError(f"kamailio did not come up: {kam.log_tail()}")


def _owns_port(pid: int, port: int, transport: str) -> bool:
    """Whether process ``pid`` or one of its children holds a socket bound to ``port`` (TCP:
    listening): the inode of the port's entry in /proc/net/{udp,tcp} among their open files.
    (A port bound by someone else does not count: outside a private namespace another program
    may hold it.)"""
    inodes = bound_socket_inodes(port, transport)
    fds = []
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fds += list(Path(f"/proc/{member}/fd").iterdir())
    for fd in fds:
        try:
            if str(fd.readlink()) in inodes:
                return True
        except OSError:
            continue
    return False

"""``python -m loadtest webrtc-load``: many aiortc participants in kefu's (or Janus's) rooms.

Load shape: ``rooms`` rooms x ``per_room`` participants; each participant publishes one Opus
stream (a tone encoded once, looped, paced at 20 ms) and hears every other participant of its
room. Participants join as ``admin`` into rooms that nobody created as a customer, so kefu
adds no bot and what is measured is pure forwarding between clients.

The clients run in 1-2 worker processes (``multiprocessing`` spawn, driven over pipes), never
in the server's process, so the server's CPU is read alone from ``/proc/PID/stat``. Clients
neither encode nor decode per packet: publishers send pre-encoded packets, and subscribers
count RTP packets straight off the receiver (the same seam as :mod:`kefu.sfu.forward`).

Loss is measured per received stream in a steady window (after every stream flows):

* ``missing``: RTP timestamp span / 960 minus packets received. kefu renumbers sequence
  numbers per subscriber, so a packet it drops leaves no sequence gap, only a timestamp jump;
  this is the end-to-end verdict.
* ``gaps``: sequence-number gaps (server -> client network only).

Each worker runs its own rooms entirely, so no room spans two processes. Every participant's
WebSocket comes from its own 127.x.y.z source address: kefu's signaling limits connections per
IP (20 burst, 2/s), which would otherwise throttle a load test's joins.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from loadtest.kefu_process import (
    KefuProcess,
    cpu_percent,
    load_average,
    process_tree,
    rss_kib,
    sample_cpu,
    start_kefu,
)
from loadtest.webrtc_load_client import (
    PTIME_SAMPLES,
    READY_TIMEOUT_S,
    ParticipantSpec,
    WorkerJob,
    worker_entry,
)

LOSS_LIMIT_PCT = 1.0
"""A run passes when no participant lost this much of what it should have heard."""


# --- measurement helpers ---------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def wait_wall(seconds: float) -> None:
    # A measurement window is a span of wall-clock time: there is no event to wait for.
    time.sleep(max(0.0, seconds))


@contextmanager
def py_spy(pid: int, out: Path | None, seconds: float) -> Iterator[None]:
    """Record ``pid`` with py-spy (raw collapsed stacks) for ``seconds`` unless ``out`` is None."""
    if out is None:
        yield
        return
    cmd = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "-o", str(out)]
    # --nonblocking: pausing kefu 200 times a second would change what is measured
    cmd += ["--duration", str(max(1, int(seconds))), "--rate", "100", "--nonblocking"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        try:
            proc.wait(seconds + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- coordinator ------------------------------------------------------------------------------


@dataclass
class Server:
    """The server under test: its PID (for /proc) and how to read its counters."""

    kind: str
    pid: int
    signaling_url: str
    counters: Callable[[], dict[str, float]] = field(default=lambda: {})
    token: Callable[[str, int], str] = field(default=lambda room, i: "")
    prepare: Callable[[int, int], None] = field(default=lambda rooms, per_room: None)
    """Called with (rooms, per_room) before the clients start (Janus: create the rooms)."""


def window_loss(
    before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> tuple[list[dict[str, float]], int]:
    """Per receiving participant over the window: received, gaps, missing, and ``expected``
    (what the others in its room sent); plus the total sent."""
    out, sent_by_room, sent = [], {}, 0
    for b, a in zip(before, after, strict=True):
        n = a["sent"] - b["sent"]
        sent += n
        sent_by_room[a["room"]] = sent_by_room.get(a["room"], 0) + n
    for b, a in zip(before, after, strict=True):
        received = gaps = missing = 0
        for ssrc, (got, seq, ts) in a["streams"].items():
            # a stream that started inside the window counts from its first packet
            got0, seq0, ts0 = b["streams"].get(ssrc, (0, seq - got, ts - got * PTIME_SAMPLES))
            n = got - got0
            received += n
            gaps += max(0, (seq - seq0) - n)
            missing += max(0, round((ts - ts0) / PTIME_SAMPLES) - n)
        expected = sent_by_room[a["room"]] - (a["sent"] - b["sent"])
        out.append({"received": received, "gaps": gaps, "missing": missing, "expected": expected})
    return out, sent


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 3) if whole > 0 else float("nan")


def run_load(
    server: Server,
    rooms: int,
    per_room: int,
    seconds: float,
    *,
    workers: int = 2,
    warmup: float = 2.0,
    join_concurrency: int = 4,
    use_uvloop: bool = True,
    profile: Path | None = None,
) -> dict[str, Any]:
    """One measurement (see module doc); returns the JSON summary."""
    tag = secrets.token_hex(3)
    server.prepare(rooms, per_room)
    specs = [
        ParticipantSpec(
            room=f"load-{tag}-{r}" if server.kind == "kefu" else str(1000 + r),
            index=i,
            per_room=per_room,
            token=server.token(f"load-{tag}-{r}", i),
            source_ip=f"127.1.{(r * per_room + i) // 250}.{(r * per_room + i) % 250 + 1}",
            freq=300.0 + 50 * i,
        )
        for r in range(rooms)
        for i in range(per_room)
    ]
    n_workers = max(1, min(workers, rooms))
    jobs = [
        WorkerJob(
            server.kind,
            server.signaling_url,
            tuple(s for s in specs if int(s.room.rsplit("-", 1)[-1]) % n_workers == w),
            join_concurrency,
            use_uvloop,
        )
        for w in range(n_workers)
    ]
    ctx = mp.get_context("spawn")
    links, procs = [], []
    for job in jobs:
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=worker_entry, args=(theirs, job), daemon=True)
        proc.start()
        links.append(mine)
        procs.append(proc)
    try:
        ready = [_receive(link, READY_TIMEOUT_S * 2) for link in links]
        wait_wall(warmup)
        # kefu's room workers (its children) are part of the server.
        server_pids = {f"server{i}": pid for i, pid in enumerate(process_tree(server.pid))}
        pids = {**server_pids, **{f"w{i}": p.pid or 0 for i, p in enumerate(procs)}}
        before_counters, cpu0 = server.counters(), sample_cpu(pids)
        before = _ask_all(links, "mark")
        with py_spy(server.pid, profile, seconds):
            wait_wall(seconds)
            after = _ask_all(links, "mark")
            cpu1, after_counters = sample_cpu(pids), server.counters()
            rss = sum(rss_kib(pid) for pid in server_pids.values()) / 1024
        for link in links:
            link.send("close")
        for link in links:
            _receive(link, 30.0)
    finally:
        for proc in procs:
            proc.join(10.0)
            if proc.is_alive():
                proc.kill()
    per_participant, sent = window_loss(before, after)
    connect = [s for r in ready for s in r["connect_s"]]
    errors = [e for r in ready for e in r["errors"]]
    received = sum(p["received"] for p in per_participant)
    missing = sum(p["missing"] for p in per_participant)
    # A participant that heard nothing has no timestamps to judge by: count it as all lost.
    worst = max(
        (
            _pct(p["missing"], p["received"] + p["missing"]) if p["received"] else 100.0
            for p in per_participant
        ),
        default=0.0,
    )
    # The timestamps cannot see a stream that stopped for good (a connection that died):
    # compare with what the room's other participants sent instead.
    stalled = sum(1 for p in per_participant if p["received"] < 0.9 * p["expected"])
    streams = rooms * per_room * (per_room - 1)
    by_process = {
        label: round(cpu_percent(cpu0, cpu1, label), 1)
        for label in server_pids
        if cpu_percent(cpu0, cpu1, label) == cpu_percent(cpu0, cpu1, label)  # not NaN
    }
    cpu = round(sum(by_process.values()), 1)
    forwarded = after_counters.get("forwarded", 0) - before_counters.get("forwarded", 0)
    summary: dict[str, Any] = {
        "benchmark": "webrtc-load",
        "server": server.kind,
        "rooms": rooms,
        "per_room": per_room,
        "participants": rooms * per_room,
        "streams": streams,
        "seconds": seconds,
        "joined": len(connect),
        "join_errors": errors[:10],
        "streams_missing": sum(r["streams_missing"] for r in ready),
        "stalled_participants": stalled,
        "connect_ms": {
            "p50": round(1000 * percentile(connect, 50), 1),
            "p99": round(1000 * percentile(connect, 99), 1),
            "max": round(1000 * max(connect, default=float("nan")), 1),
        },
        "packets": {
            "sent": sent,
            "expected": sent * (per_room - 1),
            "received": received,
            "received_per_participant": {
                "min": min((p["received"] for p in per_participant), default=0),
                "median": statistics.median([p["received"] for p in per_participant] or [0]),
            },
        },
        "loss_pct": {
            "missing": _pct(missing, received + missing),
            "gaps": _pct(sum(p["gaps"] for p in per_participant), received + missing),
            "worst_participant": worst,
            "vs_sent": _pct(max(0, sent * (per_room - 1) - received), sent * (per_room - 1)),
        },
        "server_cpu_pct": round(cpu, 1),
        "server_cpu_pct_by_process": list(by_process.values()),
        "server_cpu_pct_per_participant": round(cpu / (rooms * per_room), 3),
        "server_us_per_forwarded_packet": round(1e6 * (cpu / 100) / (received / seconds), 1)
        if received
        else float("nan"),
        "server_rss_mib": round(rss, 1),
        "server_counters_delta": {
            k: after_counters[k] - before_counters[k]
            for k in after_counters
            if k in before_counters
        },
        "forwarded_per_s": round(forwarded / seconds, 1),
        "worker_cpu_pct": [round(cpu_percent(cpu0, cpu1, f"w{i}"), 1) for i in range(n_workers)],
        "load_avg": load_average(),
        "date": time.strftime("%Y-%m-%d"),
    }
    summary["pass"] = bool(
        not errors
        and summary["streams_missing"] == 0
        and worst < LOSS_LIMIT_PCT
        and stalled == 0
        and len(connect) == rooms * per_room
    )
    if profile is not None and profile.exists():
        from loadtest.sip_load import top_frames

        summary["profile_top_self"] = [
            f"{own:5.1f}% self {incl:5.1f}% incl  {frame}"
            for frame, own, incl in top_frames(profile, 15)
        ]
    return summary


def _receive(link: Connection, timeout: float) -> Any:
    if not link.poll(timeout):
        raise TimeoutError(f"a load worker did not answer within {timeout:g} s")
    return link.recv()


def _ask_all(links: Sequence[Connection], cmd: str) -> list[dict[str, Any]]:
    # Ask all first, then collect, so both workers snapshot at nearly the same instant.
    for link in links:
        link.send(cmd)
    out: list[dict[str, Any]] = []
    for link in links:
        out.extend(_receive(link, 30.0))
    return out


# --- kefu as the server -----------------------------------------------------------------------


def kefu_counters(metrics_url: str) -> Callable[[], dict[str, float]]:
    """Reads kefu_webrtc_packets_{forwarded,dropped,transcoded} from /metrics."""
    import urllib.request

    wanted = {
        "kefu_webrtc_packets_forwarded_total": "forwarded",
        "kefu_webrtc_packets_dropped_total": "dropped",
        "kefu_webrtc_packets_transcoded_total": "transcoded",
    }

    def read() -> dict[str, float]:
        try:
            with urllib.request.urlopen(metrics_url, timeout=15) as resp:
                text = resp.read().decode()
        except OSError:
            return {}  # a saturated kefu may not answer in time; the row then says n/a
        out: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in wanted:
                out[wanted[name]] = float(value)
        return out

    return read


def kefu_server(target: str, pid: int, *, config_path: str | None = None) -> Server:
    """A running kefu at ``target`` (http://host:port); tokens signed with its secret."""
    from kefu.mediaserver.config import jwt_secret, load_config
    from kefu.signaling.tokens import mint_token
    from loadtest.webrtc import ws_url

    secret = jwt_secret(load_config(config_path))
    return Server(
        "kefu",
        pid,
        ws_url(target),
        kefu_counters(target.rstrip("/") + "/metrics"),
        # admin: may create a room, and a room without a customer gets no bot
        lambda room, i: mint_token(secret, f"load-{room}-{i}", "admin", 3600.0, room),
    )


def _start_echo_kefu(workdir: Path, *, uvloop: bool = True, room_workers: int = 1) -> KefuProcess:
    """``kefu serve --media-mode echo`` on loopback ports of its choosing, ICE host candidates
    on 127.0.0.1 only and a fresh JWT secret."""
    env = {
        "KEFU_WEBRTC_ROOM_WORKERS": str(room_workers),
        "KEFU_WEBRTC_ICE_HOST_ADDRESSES": "127.0.0.1",
        "KEFU_SERVER_STATE_DIR": str(workdir / "state"),
        "KEFU_AUTH_JWT_SECRET": secrets.token_urlsafe(24),
        "KEFU_WEBRTC_MAX_ROOMS": "1000",
    }
    # kefu_server() mints tokens in this process: it must read the same secret
    os.environ["KEFU_AUTH_JWT_SECRET"] = env["KEFU_AUTH_JWT_SECRET"]
    args = ["--media-mode", "echo", *([] if uvloop else ["--no-uvloop"])]
    # WebRTC media does not use the SIP RTP range: pass kefu's default rather than a new one.
    return start_kefu(
        workdir,
        *args,
        rtp_ports="20000-29999",
        env=env,
        log_path=workdir / "kefu.log",
        start_timeout=30.0,
    )


def pid_listening_on(port: int) -> int:
    """PID of the process with a TCP socket listening on ``port`` (for --target without
    --start-kefu): /proc/net/tcp gives the inode, /proc/*/fd gives its owner."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":
                inodes.add(cols[9])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    raise RuntimeError(f"no process of ours listens on TCP port {port}")


# --- find-max and reporting -------------------------------------------------------------------


def find_max(
    steps: Sequence[int],
    run: Callable[[int], dict[str, Any]],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Step the number of audio participants; the largest that passed before a failure."""
    results, best = [], 0
    for n in steps:
        summary = run(n)
        results.append(summary)
        log(row(summary))
        if not summary["pass"]:
            break
        best = summary["participants"]
    return {"benchmark": "webrtc-load-find-max", "max_participants": best, "runs": results}


HEADER = (
    "| server | rooms x per room | participants | offer->connected p50/p99 ms | "
    "received/participant (median) | loss missing/gaps/worst % | server CPU % | "
    "CPU % per participant | us per fwd packet | RSS MiB | fwd/dropped (window) | "
    "worker CPU % | load avg | pass |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def row(s: dict[str, Any]) -> str:
    c, loss, delta = s["connect_ms"], s["loss_pct"], s["server_counters_delta"]
    fwd = f"{delta.get('forwarded', 0):.0f}/{delta.get('dropped', 0):.0f}" if delta else "n/a"
    cpu = str(s["server_cpu_pct"])
    split = s.get("server_cpu_pct_by_process", [])
    if len(split) > 1:  # the front and its room workers (and any other child)
        cpu += " (" + " + ".join(str(x) for x in split) + ")"
    return (
        f"| {s['server']} | {s['rooms']} x {s['per_room']} | {s['participants']} | "
        f"{c['p50']}/{c['p99']} | {s['packets']['received_per_participant']['median']} | "
        f"{loss['missing']}/{loss['gaps']}/{loss['worst_participant']} | "
        f"{cpu} | {s['server_cpu_pct_per_participant']} | "
        f"{s['server_us_per_forwarded_packet']} | {s['server_rss_mib']} | {fwd} | "
        f"{'/'.join(str(x) for x in s['worker_cpu_pct'])} | "
        f"{' '.join(str(x) for x in s['load_avg'])} | {'yes' if s['pass'] else 'no'} |"
    )


def compare_rows(kefu: dict[str, Any], janus: dict[str, Any]) -> str:
    """kefu vs Janus side by side, with the ratio kefu / Janus."""

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    lines = ["| metric | kefu | Janus | kefu / Janus |", "| --- | --- | --- | --- |"]
    for label, key in (
        ("server CPU %", "server_cpu_pct"),
        ("CPU % per participant", "server_cpu_pct_per_participant"),
        ("us per forwarded packet", "server_us_per_forwarded_packet"),
        ("RSS MiB", "server_rss_mib"),
    ):
        a, b = float(kefu[key]), float(janus[key])
        lines.append(f"| {label} | {a} | {b} | {ratio(a, b)} |")
    for label, sub in (("offer->connected p50 ms", "p50"), ("offer->connected p99 ms", "p99")):
        a, b = float(kefu["connect_ms"][sub]), float(janus["connect_ms"][sub])
        lines.append(f"| {label} | {a} | {b} | {ratio(a, b)} |")
    a, b = float(kefu["loss_pct"]["missing"]), float(janus["loss_pct"]["missing"])
    lines.append(f"| loss (missing) % | {a} | {b} | |")
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    parser.add_argument("--target", default=None, help="kefu's HTTP base URL, http://HOST:PORT")
    parser.add_argument("--start-kefu", action="store_true", help="start kefu here (echo mode)")
    parser.add_argument("--rooms", type=int, default=5)
    parser.add_argument("--per-room", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    parser.add_argument("--warmup", type=float, default=2.0, help="after every stream flows")
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2), help="client processes")
    parser.add_argument(
        "--room-workers", type=int, default=1, help="--start-kefu: kefu's webrtc.room_workers"
    )
    parser.add_argument("--join-concurrency", type=int, default=4, help="joins in flight/worker")
    parser.add_argument("--config", default=None, help="kefu config (JWT secret) for --target")
    parser.add_argument("--no-uvloop", action="store_true", help="kefu and clients on asyncio")
    parser.add_argument("--find-max", action="store_true", help="step participants (below)")
    parser.add_argument("--steps", default="20,40,60,80,120,160,200,240,300", help="participants")
    parser.add_argument("--compare-janus", action="store_true", help="same load on Janus too")
    parser.add_argument("--profile", help="py-spy kefu in the window into this file")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def main(args: Any) -> int:
    import tempfile
    from urllib.parse import urlsplit

    if not args.start_kefu and not args.target:
        sys.stderr.write("webrtc-load: give --target or --start-kefu\n")
        return 2
    profile = Path(args.profile).resolve() if args.profile else None
    uvloop = not args.no_uvloop
    with tempfile.TemporaryDirectory(prefix="kefu-webrtc-load-") as tmp:
        kefu_proc = (
            _start_echo_kefu(Path(tmp), uvloop=uvloop, room_workers=args.room_workers)
            if args.start_kefu
            else None
        )
        try:
            if kefu_proc is not None:
                target = f"http://127.0.0.1:{kefu_proc.http_port}"
                server = kefu_server(target, kefu_proc.pid)
            else:
                target = args.target
                port = urlsplit(target).port or 80
                server = kefu_server(target, pid_listening_on(port), config_path=args.config)

            def run(participants: int, on: Server = server) -> dict[str, Any]:
                return run_load(
                    on,
                    max(1, participants // args.per_room),
                    args.per_room,
                    args.seconds,
                    workers=args.workers,
                    warmup=args.warmup,
                    join_concurrency=args.join_concurrency,
                    use_uvloop=uvloop,
                    profile=profile if on is server else None,
                )

            if args.find_max:
                steps = [int(x) for x in args.steps.split(",")]
                print(HEADER, flush=True)
                result: dict[str, Any] = find_max(steps, run, lambda r: print(r, flush=True))
                rows = "\n".join(row(r) for r in result["runs"])
            else:
                result = run(args.rooms * args.per_room)
                rows = row(result)
        finally:
            if kefu_proc is not None:
                kefu_proc.stop(timeout=15.0)
        if args.compare_janus and not args.find_max:
            from loadtest import janus

            janus_result = janus.run_janus(Path(tmp), lambda s: run(args.rooms * args.per_room, s))
            result = {"benchmark": "webrtc-load-compare", "kefu": result, "janus": janus_result}
            if "error" not in janus_result:
                rows += (
                    "\n" + row(janus_result) + "\n\n" + compare_rows(result["kefu"], janus_result)
                )
    text = json.dumps(result, indent=2, default=str)
    sys.stdout.write(text + "\n\n" + HEADER + "\n" + rows + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0

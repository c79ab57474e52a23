"""Failover benchmark of the local cluster: Kamailio in front of kefu nodes in echo mode.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m loadtest.cluster_failover'
    ... -m loadtest.cluster_failover --rate 10 --duration 20 --kill-at 5
    ... -m loadtest.cluster_failover --capacity 200 --hold 15

Failover (default): two nodes, a steady SIPp call rate (``uac_echo``: 0.5 s of speech, BYE a
second later) for ``--duration`` seconds; ``--kill-at`` seconds in, one node gets SIGKILL.
Every call is read back from SIPp's message trace (INVITE sent, 200 received, which node's
Contact, BYE answered), so the result says: calls attempted / failed, new calls (INVITE after
the kill) that failed and the window they fell in, calls lost in progress on the killed node,
calls that waited on the dead node and were answered by the survivor (setup longer than half
of Kamailio's FR_TIMER, ``--fr-timer``: kefu answers an echo call in milliseconds), the time
from the kill to the first of those and to Kamailio marking the node inactive (kamcmd polled
every 50 ms).

Capacity (``--capacity N``): N concurrent echo calls of ``--hold`` s through Kamailio with 1
node and with 2: SIPp ok/failed, inbound loss and jitter from the nodes' ``rtp_closed`` logs,
calls per node, CPU of the nodes, Kamailio and SIPp in the steady window (Kamailio's flood
limit is raised: SIPp is one source ramping at N/5 calls/s).

Prints one JSON object. Needs root (SIPp plays RTP from a raw socket) and a private network
namespace (the peer ports of docs/TESTING.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtest.cluster import Cluster, start_cluster
from loadtest.cluster_plots import plot_failover
from loadtest.kamailio import is_active
from loadtest.kefu_process import cpu_seconds, load_average, process_tree
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import (
    SippProcess,
    sipp_command,
    sipp_media_port,
    spawn_sipp,
)
from loadtest.sip_load import parse_rtp_stats, percentile, sleep_until

# --- SIPp's message trace, per call ------------------------------------------------------------


@dataclass
class CallTrace:
    invite_at: float
    answered_at: float | None = None
    node: str | None = None
    """host:port of the Contact in the 200: the node that answered."""
    final_status: int | None = None
    bye_ok: bool = False


def _when(stamp: str) -> float:
    # SIPp writes local time with microseconds, the same clock as time.time()
    return datetime.strptime(stamp.strip(), "%Y-%m-%d %H:%M:%S.%f").timestamp()


def parse_message_trace(text: str) -> dict[str, CallTrace]:
    """Call-ID -> what happened to it, from a SIPp ``-trace_msg`` file of a UAC."""
    calls: dict[str, CallTrace] = {}
    for block in text.split("-" * 47 + " ")[1:]:
        stamp, _, rest = block.partition("\n")
        direction, _, message = rest.partition("\n\n")
        headers = dict(_headers(message))
        call_id, cseq = headers.get("call-id"), headers.get("cseq", "")
        if call_id is None:
            continue
        first = message.split("\n", 1)[0]
        at = _when(stamp)
        if "sent" in direction and first.startswith("INVITE "):
            calls.setdefault(call_id, CallTrace(at))
            continue
        call = calls.get(call_id)
        if call is None or not first.startswith("SIP/2.0 ") or "received" not in direction:
            continue
        status = int(first.split()[1])
        if cseq.endswith("INVITE") and status >= 200:
            if status < 300 and call.answered_at is None:
                call.answered_at = at
                contact = headers.get("contact", "")
                call.node = contact.split("@", 1)[-1].split(";")[0].strip("<>")
            call.final_status = call.final_status or status
        elif cseq.endswith("BYE") and 200 <= status < 300:
            call.bye_ok = True
    return calls


def _headers(message: str) -> list[tuple[str, str]]:
    out = []
    for line in message.split("\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            out.append((name.strip().lower(), value.strip()))
    return out


# --- failover ---------------------------------------------------------------------------------


def _uac(work: Path, entry: str, calls: int, rate: float, audio_ms: int, **kw: Any) -> SippProcess:
    sipp_dir = work / "sipp"
    sipp_dir.mkdir()
    cmd = sipp_command(
        "uac_echo",
        entry,
        sipp_dir,
        calls=calls,
        rate=rate,
        media_port=sipp_media_port(),
        keys={"pcap": work / "speech.pcap"},
        variables={"audio_ms": audio_ms},
        **kw,
    )
    return SippProcess(spawn_sipp(cmd, sipp_dir), sipp_dir, port=0, media_port=None)


def _watch_inactive(cluster: Cluster, dest: str, since: float, out: dict[str, float]) -> None:
    """Poll the dispatcher until ``dest`` is not active; record when (seconds after
    ``since``). Kamailio announces state changes only in its log: poll kamcmd."""
    deadline = since + 30
    while time.time() < deadline:
        with contextlib.suppress(Exception):
            if not is_active(cluster.dispatcher_state().get(dest)):
                out["inactive_after_s"] = round(time.time() - since, 3)
                return
        time.sleep(0.05)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def _setup_summary(setups: list[float]) -> dict[str, Any]:
    return {
        "calls": len(setups),
        "p50_ms": _ms(percentile(setups, 50)) if setups else None,
        "p99_ms": _ms(percentile(setups, 99)) if setups else None,
        "max_ms": _ms(max(setups)) if setups else None,
    }


def summarize_failover(
    calls: dict[str, CallTrace], killed_at: float, victim: str, survivor: str, waited_s: float
) -> dict[str, Any]:
    """The failover figures of one run (see the module docstring); a call answered by the
    survivor more than ``waited_s`` after its INVITE waited on the dead node first."""
    ok = [c for c in calls.values() if c.answered_at is not None and c.bye_ok]
    failed = [c for c in calls.values() if c not in ok]
    new = [c for c in calls.values() if c.invite_at >= killed_at]
    new_failed = [c for c in new if c in failed]
    lost = [c for c in failed if c.node == victim and (c.answered_at or 0) < killed_at]
    over = [
        c
        for c in calls.values()
        if c.node == survivor
        and c.answered_at is not None
        and c.answered_at >= killed_at
        and c.answered_at - c.invite_at > waited_s
    ]
    by_survivor = [c.answered_at for c in new if c.node == survivor and c.answered_at]
    by_victim = [c.invite_at for c in calls.values() if c.node == victim]

    def rel(values: list[float]) -> list[float]:
        return sorted(round(v - killed_at, 3) for v in values)

    def span(values: list[float]) -> list[float] | None:
        return [rel(values)[0], rel(values)[-1]] if values else None

    def first(values: list[float]) -> float | None:
        return rel(values)[0] if values else None

    def setups(after: bool) -> list[float]:
        return [
            c.answered_at - c.invite_at
            for c in ok
            if c.answered_at is not None and (c.invite_at >= killed_at) == after
        ]

    return {
        "attempted": len(calls),
        "succeeded": len(ok),
        "failed": len(failed),
        "new_calls_after_kill": len(new),
        "new_calls_failed": len(new_failed),
        "new_call_failure_window_s": span([c.invite_at for c in new_failed]),
        "in_progress_lost_on_killed_node": len(lost),
        "failed_over": len(over),
        "failed_over_invites_s": span([c.invite_at for c in over]),
        "first_failover_answer_s": first([c.answered_at for c in over if c.answered_at]),
        "first_new_call_answered_by_survivor_s": first(by_survivor),
        "last_call_answered_by_killed_node_s": rel(by_victim)[-1] if by_victim else None,
        "setup_before_kill": _setup_summary(setups(after=False)),
        "setup_after_kill": _setup_summary(setups(after=True)),
    }


def failover(
    rate: float,
    duration: float,
    kill_at: float,
    fr_timer_ms: int = 1500,
    audio_s: float = 0.5,
    plot: Path | None = None,
) -> dict[str, Any]:
    calls = max(1, round(rate * duration))
    with tempfile.TemporaryDirectory(prefix="kefu-failover-") as tmp:
        work = Path(tmp)
        audio_ms = int(1000 * make_rtp_pcap(work / "speech.pcap", speech_like_pcm(audio_s)))
        defines = {"FR_TIMER": fr_timer_ms}
        with start_cluster(work / "cluster", nodes=2, kamailio_defines=defines) as cluster:
            survivor, victim = cluster.nodes[1], cluster.nodes[2]
            sipp = _uac(
                work,
                cluster.entry,
                calls,
                rate,
                audio_ms,
                timeout=duration + 30,
                extra=["-trace_msg", "-message_file", str(work / "msg.log")],
            )
            started = time.monotonic()
            sleep_until(started + kill_at)
            watch: dict[str, float] = {}
            killed_at = time.time()
            cluster.kill_node(victim.k, signal.SIGKILL)
            watcher = threading.Thread(
                target=_watch_inactive, args=(cluster, victim.sip, killed_at, watch)
            )
            watcher.start()
            result = sipp.wait(timeout=duration + 40)
            watcher.join()
            trace = parse_message_trace((work / "msg.log").read_text(errors="replace"))
    summary = summarize_failover(trace, killed_at, victim.sip, survivor.sip, fr_timer_ms / 2000)
    if plot is not None:
        inactive = watch.get("inactive_after_s")
        plot_failover(trace, killed_at, victim.sip, survivor.sip, inactive, plot)
    return {
        "benchmark": "cluster-failover",
        "nodes": 2,
        "rate_cps": rate,
        "duration_s": duration,
        "kill_at_s": kill_at,
        "fr_timer_ms": fr_timer_ms,
        "call_s": round(audio_ms / 1000 + 1, 2),
        "sipp": {"successful": result.successful, "failed": result.failed},
        "kamailio_marked_inactive_s": watch.get("inactive_after_s"),
        **summary,
        "load_average": load_average(),
    }


# --- capacity ---------------------------------------------------------------------------------


def _tree_cpu(pid: int) -> float:
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError, ValueError):
            total += cpu_seconds(member)
    return total


def _cpu_snapshot(pids: dict[str, int]) -> tuple[float, dict[str, float]]:
    return time.monotonic(), {label: _tree_cpu(pid) for label, pid in pids.items()}


def _inbound(cluster: Cluster) -> dict[str, Any]:
    received = lost = 0.0
    jitters: list[float] = []
    for node in cluster.nodes.values():
        assert node.process is not None
        for event in node.process.events("rtp_closed"):
            stats = parse_rtp_stats(str(event.get("stats", "")))
            received += stats.get("packets_received", 0)
            lost += max(0.0, stats.get("packets_lost", 0))
            if "jitter_ms" in stats:
                jitters.append(stats["jitter_ms"])
    total = received + lost
    return {
        "loss_pct": round(100 * lost / total, 4) if total else math.nan,
        "jitter_p50_ms": round(percentile(jitters, 50), 2),
        "jitter_p99_ms": round(percentile(jitters, 99), 2),
    }


def capacity_run(nodes: int, calls: int, hold: float) -> dict[str, Any]:
    rate = max(10.0, calls / 5)
    ramp = calls / rate
    with tempfile.TemporaryDirectory(prefix="kefu-capacity-") as tmp:
        work = Path(tmp)
        audio_ms = int(1000 * make_rtp_pcap(work / "speech.pcap", speech_like_pcm(hold)))
        # the load generator is one source: lift Kamailio's flood limit above its ramp
        defines = {"PIKE_DENSITY": 10_000}
        with start_cluster(work / "cluster", nodes=nodes, kamailio_defines=defines) as cluster:
            sipp = _uac(
                work,
                cluster.entry,
                calls,
                rate,
                audio_ms,
                max_concurrent=calls,
                timeout=ramp + hold + 30,
            )
            pids = {n.id: n.pid for n in cluster.nodes.values()}
            pids |= {"kamailio": cluster.kamailio.pid, "sipp": sipp.pid}
            t0 = time.monotonic()
            sleep_until(t0 + ramp + 1.0)
            a = _cpu_snapshot(pids)
            sleep_until(max(a[0] + 1.0, t0 + audio_ms / 1000 + 0.8))
            b = _cpu_snapshot(pids)
            result = sipp.wait(timeout=ramp + hold + 45)
            time.sleep(0.5)  # the nodes log rtp_closed right after the last BYE
            per_node = {
                n.id: int(n.metric("kefu_calls_total", 'result="completed"'))
                for n in cluster.nodes.values()
            }
            inbound = _inbound(cluster)
    span = b[0] - a[0]
    return {
        "nodes": nodes,
        "calls": calls,
        "hold_s": hold,
        "sipp": {"successful": result.successful, "failed": result.failed},
        "calls_per_node": per_node,
        "inbound": inbound,
        "steady_cpu_pct": {k: round(100 * (b[1][k] - a[1][k]) / span, 1) for k in pids},
        "load_average": load_average(),
    }


def capacity(calls: int, hold: float) -> dict[str, Any]:
    return {
        "benchmark": "cluster-capacity",
        "runs": [capacity_run(n, calls, hold) for n in (1, 2)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.cluster_failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rate", type=float, default=10.0, help="calls per second")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of calls")
    parser.add_argument("--kill-at", type=float, default=5.0, help="SIGKILL a node after S s")
    parser.add_argument(
        "--fr-timer",
        type=int,
        default=1500,
        metavar="MS",
        help="Kamailio's FR_TIMER: how long a silent node is waited for",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=None,
        metavar="CALLS",
        help="instead: CALLS concurrent echo calls with 1 node, then 2",
    )
    parser.add_argument("--hold", type=float, default=15.0, help="capacity: seconds per call")
    parser.add_argument("--plot", type=Path, help="failover: write the calls' timeline (PNG)")
    args = parser.parse_args(argv)
    if args.capacity is not None:
        out = capacity(args.capacity, args.hold)
    else:
        out = failover(args.rate, args.duration, args.kill_at, args.fr_timer, plot=args.plot)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

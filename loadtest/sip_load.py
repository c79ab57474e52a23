"""SIP trunk benchmarks of a real ``kefu serve`` process: concurrent echo calls, call setup.

``sip_echo`` places N concurrent SIPp echo calls that each replay a speech pcap for a hold
time, and judges both media directions: what kefu received (its own ``rtp_closed`` stats)
and what it echoed (a tshark capture of a small sample of calls, analysed with
:mod:`loadtest.rtpcap`). It also reads kefu's and SIPp's CPU and memory from /proc.
``sip_setup`` measures INVITE -> 200 OK on the wire at a fixed call rate.

Every process started here is stopped by its PID; everything binds 127.0.0.1 only, so run
the tools inside ``unshare -n sh -c 'ip link set lo up && ...'``.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadtest import kefu_process
from loadtest.kefu_process import KefuProcess, cpu_percent, load_average, rss_kib, sample_cpu
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import (
    SippProcess,
    SippResult,
    TsharkCapture,
    sipp_command,
    spawn_sipp,
    stop_process,
)
from loadtest.rtpcap import rtp_streams, udp_datagrams

LOCALHOST = "127.0.0.1"
KEFU_RTP_LO = 30000
KEFU_RTP_HI = 39999
SIPP_MEDIA_PORT = 6000
_STATS_FIELD = re.compile(r"(\w+)=([-\w.e+]+|None)")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def sleep_until(deadline: float) -> None:
    # A measurement window has no event to wait for: it is a span of wall-clock time.
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def start_kefu(
    workdir: Path,
    *,
    sip_port: int = 5070,
    http_port: int = 8090,
    uvloop: bool = True,
    max_calls: int = 2000,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> KefuProcess:
    """``kefu serve`` in echo mode on fixed ports, logging to ``workdir/kefu.log``; ``env``
    is laid over this process's environment (e.g. ``KEFU_CALLS_RECORD``)."""
    return kefu_process.start_kefu(
        workdir,
        "--max-calls",
        str(max_calls),
        "--media-mode",  # explicit: the default became "ai" (models load, calls get 503)
        "echo",
        *([] if uvloop else ["--no-uvloop"]),
        *extra,
        sip_listen=f"{LOCALHOST}:{sip_port}",
        http_listen=f"{LOCALHOST}:{http_port}",
        rtp_ports=f"{KEFU_RTP_LO}-{KEFU_RTP_HI}",
        env=env,
        log_path=workdir / "kefu.log",
    )


def parse_rtp_stats(text: str) -> dict[str, float]:
    """The numeric fields of an ``RtpStats(...)`` repr as logged in ``rtp_closed``."""
    out: dict[str, float] = {}
    for key, value in _STATS_FIELD.findall(text):
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def parse_histogram(metrics: str, name: str) -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of a Prometheus histogram, sorted by bound."""
    buckets = []
    pattern = re.compile(rf'^{re.escape(name)}_bucket{{.*le="([^"]+)".*}} ([-\d.e+]+)$')
    for line in metrics.splitlines():
        m = pattern.match(line)
        if m:
            buckets.append((float(m.group(1)), float(m.group(2))))
    return sorted(buckets)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus-style quantile (q in 0..1), interpolating linearly inside a bucket."""
    if not buckets or buckets[-1][1] <= 0:
        return float("nan")
    total = buckets[-1][1]
    target = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= target:
            if bound == float("inf"):
                return prev_bound
            inside = count - prev_count
            share = (target - prev_count) / inside if inside > 0 else 1.0
            return prev_bound + (bound - prev_bound) * share
        prev_bound, prev_count = bound, count
    return prev_bound


# --- the processes of one run ---------------------------------------------------------------


def _start_child_kefu(
    children: contextlib.ExitStack, work: Path, sip_port: int, http_port: int, uvloop: bool
) -> KefuProcess:
    kefu = start_kefu(work, sip_port=sip_port, http_port=http_port, uvloop=uvloop)
    children.callback(kefu.stop)
    return kefu


def _start_child_tshark(
    children: contextlib.ExitStack, capture_filter: str, path: Path
) -> TsharkCapture:
    tshark = TsharkCapture(capture_filter=capture_filter, path=path).start()
    children.callback(tshark.cleanup)
    return tshark


def _start_child_uac_echo(
    children: contextlib.ExitStack,
    work: Path,
    sip_port: int,
    pcap: Path,
    audio_ms: int,
    **options: Any,
) -> SippProcess:
    """SIPp's uac_echo replaying ``pcap`` to kefu in the background (so its CPU can be
    sampled while it runs), logging into ``work/sipp``."""
    sipp_dir = work / "sipp"
    sipp_dir.mkdir()
    cmd = sipp_command(
        "uac_echo",
        f"{LOCALHOST}:{sip_port}",
        sipp_dir,
        media_port=SIPP_MEDIA_PORT,
        keys={"pcap": pcap},
        variables={"audio_ms": audio_ms},
        **options,
    )
    # port 0: a client, SIPp picks its own SIP port
    sipp = SippProcess(spawn_sipp(cmd, sipp_dir), sipp_dir, port=0, media_port=SIPP_MEDIA_PORT)
    children.callback(sipp.stop)  # after wait() a no-op that returns the kept result
    return sipp


def _invite_histogram(kefu: KefuProcess) -> list[tuple[float, float]]:
    """kefu's INVITE -> 200 OK histogram; empty when /metrics does not answer."""
    try:
        return parse_histogram(kefu.metrics(), "kefu_invite_answer_seconds")
    except OSError:
        return []


def _sipp_summary(result: SippResult, expected: int) -> dict[str, Any]:
    return {
        "returncode": result.returncode,
        "successful": result.successful,
        "failed": result.failed,
        "expected": expected,
        "ok": result.failed == 0 and result.successful == expected,
        "errors_tail": result.errors[-800:] if result.failed else "",
    }


# --- sip-echo ------------------------------------------------------------------------------


def sip_echo(
    calls: int,
    *,
    hold: float = 20.0,
    rate: float | None = None,
    transport: str = "u1",
    uvloop: bool = True,
    sample: int = 10,
    sip_port: int = 5070,
    http_port: int = 8090,
    profile: Path | None = None,
    keep: Path | None = None,
) -> dict[str, Any]:
    """N concurrent echo calls of ``hold`` seconds; a JSON-able summary (see BENCHMARKS.md).

    With ``profile``, py-spy samples kefu during the steady window into that file (collapsed
    stacks, ``--format raw``); :func:`top_frames` summarises it.
    """
    rate = rate or max(10.0, calls / 5)
    sample = max(1, min(sample, calls))
    ramp = calls / rate
    with tempfile.TemporaryDirectory(prefix="kefu-bench-echo-") as tmp:
        work = Path(tmp)
        pcap = work / "speech.pcap"
        seconds = make_rtp_pcap(pcap, speech_like_pcm(hold))
        audio_ms = int(round(seconds * 1000))
        with contextlib.ExitStack() as children:
            kefu = _start_child_kefu(children, work, sip_port, http_port, uvloop)
            time.sleep(1.0)  # let import-time allocation settle before the idle reading
            idle_a = sample_cpu({"kefu": kefu.pid})
            time.sleep(2.0)
            idle_b = sample_cpu({"kefu": kefu.pid})
            rss_idle = rss_kib(kefu.pid)
            # kefu hands out even RTP ports upwards from the bottom of its range, so the
            # first `sample` calls echo from these source ports: a BPF filter this narrow
            # keeps tshark's cost out of the measurement.
            hi = KEFU_RTP_LO + 2 * sample - 1
            tshark = _start_child_tshark(
                children, f"udp and src portrange {KEFU_RTP_LO}-{hi}", work / "echo.pcap"
            )
            t0 = time.monotonic()
            sipp = _start_child_uac_echo(
                children,
                work,
                sip_port,
                pcap,
                audio_ms,
                transport=transport,
                calls=calls,
                rate=rate,
                max_concurrent=calls,
                timeout=ramp + hold + 30,
            )
            pids = {"kefu": kefu.pid, "sipp": sipp.pid}
            # Steady state: every call is up (ramp + margin) and none has hung up yet
            # (the first call sends BYE audio_ms + 1 s after it was answered).
            win_a = t0 + ramp + 1.0
            win_b = max(win_a + 1.0, t0 + audio_ms / 1000 + 0.8)
            sleep_until(win_a)
            steady_a = sample_cpu(pids)
            spy = _start_py_spy(kefu.pid, profile, win_b - win_a) if profile else None
            sleep_until((win_a + win_b) / 2)
            try:
                active = kefu.metric("kefu_active_calls", default=float("nan"))
            except OSError:
                active = float("nan")
            rss_steady = rss_kib(kefu.pid)
            sleep_until(win_b)
            steady_b = sample_cpu(pids)
            if spy is not None:
                stop_process(spy, signal.SIGINT, 10.0)
            result = sipp.wait(timeout=ramp + hold + 45)
            time.sleep(0.5)  # kefu logs rtp_closed right after answering the last BYE
            tshark.stop()
            invite_hist = _invite_histogram(kefu)
        inbound = _inbound_from_logs(kefu)
        if keep is not None:  # the raw evidence, for a closer look at a surprising run
            keep.mkdir(parents=True, exist_ok=True)
            for name in ("kefu.log", "echo.pcap"):
                if (work / name).exists():
                    shutil.copy(work / name, keep / name)
        echo = _echo_from_capture(work / "echo.pcap", kefu, sample, int(seconds / 0.02 + 0.5))

    kefu_cpu = cpu_percent(steady_a, steady_b, "kefu")
    idle_cpu = cpu_percent(idle_a, idle_b, "kefu")
    n_active = float(calls) if math.isnan(active) or active <= 0 else active
    summary: dict[str, Any] = {
        "benchmark": "sip-echo",
        "calls": calls,
        "hold_s": hold,
        "rate_cps": rate,
        "transport": transport,
        "loop": "uvloop" if uvloop else "asyncio",
        "load_average": load_average(),
        "sipp": _sipp_summary(result, calls),
        "inbound": inbound,
        "echo": echo,
        "kefu": {
            "pid_exit": kefu.proc.returncode,
            "idle_cpu_pct": round(idle_cpu, 2),
            "steady_cpu_pct": round(kefu_cpu, 2),
            "steady_window_s": round(steady_b.wall - steady_a.wall, 2),
            "active_calls": n_active,
            "cpu_pct_per_call": round((kefu_cpu - idle_cpu) / n_active, 4),
            "rss_idle_mib": round(rss_idle / 1024, 1),
            "rss_steady_mib": round(rss_steady / 1024, 1),
            "rss_kib_per_call": round((rss_steady - rss_idle) / n_active, 1),
            "invite_answer_p50_ms": round(1000 * histogram_quantile(invite_hist, 0.5), 2),
        },
        "sipp_cpu_pct": round(cpu_percent(steady_a, steady_b, "sipp"), 2),
    }
    summary["pass"] = echo_verdict(summary)
    summary["pass_gaps_only"] = echo_verdict(summary, strict=False)
    return summary


def _inbound_from_logs(kefu: KefuProcess) -> dict[str, Any]:
    received = lost = sent = 0.0
    jitters = []
    closed = kefu.events("rtp_closed")
    for event in closed:
        stats = parse_rtp_stats(str(event.get("stats", "")))
        received += stats.get("packets_received", 0)
        lost += max(0.0, stats.get("packets_lost", 0))
        sent += stats.get("packets_sent", 0)
        if "jitter_ms" in stats:
            jitters.append(stats["jitter_ms"])
    total = received + lost
    return {
        "calls_logged": len(closed),
        "packets_received": int(received),
        "packets_lost": int(lost),
        "loss_pct": round(100 * lost / total, 4) if total else float("nan"),
        "kefu_packets_sent": int(sent),
        # kefu's own view of the echo: frames it skipped instead of sending (all calls)
        "echo_not_sent_pct": round(100 * (1 - sent / received), 4) if received else float("nan"),
        "jitter_p50_ms": round(percentile(jitters, 50), 3),
        "jitter_p99_ms": round(percentile(jitters, 99), 3),
    }


def _echo_from_capture(path: Path, kefu: KefuProcess, sample: int, per_call: int) -> dict[str, Any]:
    """Loss and A.8 jitter of kefu's echo for the sampled calls, from the capture.

    Sequence gaps only show loss inside a stream; packets missing at its head or tail
    (an echo that starts late or is cut at BYE) show as ``missing_pct``: distinct packets
    echoed against the ``per_call`` packets each caller sent.
    """
    ports = [int(e["rtp_port"]) for e in kefu.events("rtp_started") if "rtp_port" in e]
    sampled = set(ports[:sample])
    streams = rtp_streams(path, ports=sampled) if path.exists() else {}
    expected = lost = distinct = 0
    jitters: list[float] = []
    durations: list[float] = []
    max_jitter = 0.0
    n = 0
    for key, stream in streams.items():
        if key.src[1] not in sampled or len(stream.packets) < 10:
            continue
        st = stream.stats()
        n += 1
        expected += st.expected
        lost += st.lost
        distinct += st.expected - st.lost
        jitters.append(st.jitter_ms)
        durations.append(st.duration_s)
        max_jitter = max(max_jitter, st.max_jitter_ms)
    return {
        "streams": n,
        "sampled_ports": sorted(sampled),
        "packets_expected": expected,
        "packets_lost": lost,
        "loss_pct": round(100 * lost / expected, 4) if expected else float("nan"),
        "missing_pct": round(100 * (1 - distinct / (n * per_call)), 4) if n else float("nan"),
        "duration_p50_s": round(percentile(durations, 50), 3),
        "jitter_p50_ms": round(percentile(jitters, 50), 3),
        "jitter_p99_ms": round(percentile(jitters, 99), 3),
        "max_running_jitter_ms": round(max_jitter, 3),
    }


def echo_verdict(
    summary: dict[str, Any],
    *,
    max_loss_pct: float = 0.5,
    max_jitter_ms: float = 20.0,
    strict: bool = True,
) -> bool:
    """The --find-max criterion: no SIPp failure, < 0.5 % loss, p99 jitter < 20 ms both ways.

    kefu's echo numbers its own packets, so a frame it skips leaves no sequence gap; only
    ``strict`` (the default) also counts echoed packets missing against what was sent.
    """
    inbound, echo = summary["inbound"], summary["echo"]
    checks = [
        summary["sipp"]["ok"],
        inbound["loss_pct"] < max_loss_pct,  # NaN (nothing logged) compares False
        echo["loss_pct"] < max_loss_pct,
        echo["missing_pct"] < max_loss_pct or not strict,
        inbound["jitter_p99_ms"] < max_jitter_ms,
        echo["jitter_p99_ms"] < max_jitter_ms,
    ]
    return all(checks)


def echo_row(s: dict[str, Any]) -> str:
    """One Markdown table row of a sip-echo summary (header: :data:`ECHO_HEADER`)."""
    k, i, e = s["kefu"], s["inbound"], s["echo"]
    return (
        f"| {s['calls']} | {s['hold_s']:g} | {s['rate_cps']:g} | {s['transport']} | {s['loop']} "
        f"| {s['sipp']['successful']}/{s['sipp']['failed']} "
        f"| {i['loss_pct']:.3f} | {i['jitter_p50_ms']:.2f}/{i['jitter_p99_ms']:.2f} "
        f"| {e['loss_pct']:.2f}/{e['missing_pct']:.2f}/{i['echo_not_sent_pct']:.2f} "
        f"| {e['jitter_p50_ms']:.2f}/{e['jitter_p99_ms']:.2f} "
        f"| {k['steady_cpu_pct']:.1f} | {k['cpu_pct_per_call']:.3f} "
        f"| {k['rss_idle_mib']:.0f}/{k['rss_steady_mib']:.0f} | {k['rss_kib_per_call']:.0f} "
        f"| {s['sipp_cpu_pct']:.0f} | {' '.join(str(x) for x in s['load_average'])} "
        f"| {_yes(s['pass'])}/{_yes(s.get('pass_gaps_only'))} |"
    )


def _yes(flag: object) -> str:
    return "-" if flag is None else "yes" if flag else "no"


ECHO_HEADER = (
    "| calls | hold s | cps | transport | loop | SIPp ok/failed | in loss % | in jitter p50/p99 ms "
    "| echo gap/missing/not-sent % | echo jitter p50/p99 ms | kefu CPU % | CPU % per call "
    "| RSS idle/steady MiB | KiB per call | SIPp CPU % | load avg | pass strict/gaps |\n"
    "|" + " --- |" * 17
)


def find_max(
    steps: Sequence[int],
    run: Callable[[int], dict[str, Any]],
    log: Callable[[str], None] = print,
    *,
    verdict: str = "pass",
) -> dict[str, Any]:
    """Run ``steps`` in order; the largest N whose ``verdict`` key held before the first
    failure (``pass``, or ``pass_gaps_only`` for the sequence-gap-only echo criterion)."""
    results = []
    best = 0
    for n in steps:
        summary = run(n)
        results.append(summary)
        log(echo_row(summary))
        if not summary[verdict]:
            break
        best = n
    return {
        "benchmark": "sip-echo-find-max",
        "criterion": verdict,
        "max_calls": best,
        "runs": results,
    }


def _start_py_spy(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    cmd = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "-o", str(out)]
    cmd += ["--duration", str(max(1, int(seconds))), "--rate", "200"]
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def top_frames(collapsed: Path, limit: int = 20) -> list[tuple[str, float, float]]:
    """(frame, self %, inclusive %) of a py-spy raw profile, by self time."""
    self_n: dict[str, int] = {}
    incl_n: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        # One row per function, not per line: drop the ":LINE" py-spy appends.
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        self_n[frames[-1]] = self_n.get(frames[-1], 0) + count
        for frame in set(frames):
            incl_n[frame] = incl_n.get(frame, 0) + count
    ranked = sorted(self_n.items(), key=lambda kv: -kv[1])[:limit]
    return [(f, 100 * n / total, 100 * incl_n[f] / total) for f, n in ranked] if total else []


# --- sip-setup -----------------------------------------------------------------------------

_CALL_ID = re.compile(rb"^(?:call-id|i)[ \t]*:[ \t]*(\S+)", re.IGNORECASE | re.MULTILINE)
_CSEQ = re.compile(rb"^cseq[ \t]*:[ \t]*\d+[ \t]+(\w+)", re.IGNORECASE | re.MULTILINE)


def setup_latencies(capture: Path, sip_port: int) -> list[float]:
    """Seconds from each first INVITE (to ``sip_port``) to the first 200 OK for its Call-ID."""
    invites: dict[bytes, float] = {}
    answers: dict[bytes, float] = {}
    for d in udp_datagrams(capture):
        m = _CALL_ID.search(d.payload)
        if m is None:
            continue
        call_id = m.group(1)
        if d.dst[1] == sip_port and d.payload.startswith(b"INVITE "):
            invites.setdefault(call_id, d.arrival)
        elif d.src[1] == sip_port and d.payload.startswith(b"SIP/2.0 200"):
            cseq = _CSEQ.search(d.payload)
            if cseq is not None and cseq.group(1) == b"INVITE":
                answers.setdefault(call_id, d.arrival)
    return [answers[c] - t for c, t in invites.items() if c in answers]


def sip_setup(
    cps: float,
    calls: int,
    *,
    uvloop: bool = True,
    sip_port: int = 5070,
    http_port: int = 8090,
) -> dict[str, Any]:
    """INVITE -> 200 OK latency of short calls (INVITE, 200, ACK, 1 s, BYE) at ``cps``."""
    with tempfile.TemporaryDirectory(prefix="kefu-bench-setup-") as tmp:
        work = Path(tmp)
        # uac_echo with a one-packet pcap and audio_ms=0 is INVITE/200/ACK, 1 s pause, BYE.
        pcap = work / "blip.pcap"
        make_rtp_pcap(pcap, speech_like_pcm(0.02))
        with contextlib.ExitStack() as children:
            kefu = _start_child_kefu(children, work, sip_port, http_port, uvloop)
            tshark = _start_child_tshark(children, f"udp and port {sip_port}", work / "sip.pcap")
            a = sample_cpu({"kefu": kefu.pid})
            sipp = _start_child_uac_echo(
                children, work, sip_port, pcap, 0, calls=calls, rate=cps, timeout=calls / cps + 30
            )
            result = sipp.wait(timeout=calls / cps + 45)
            b = sample_cpu({"kefu": kefu.pid})
            time.sleep(0.3)
            tshark.stop()
            hist = _invite_histogram(kefu)
        lat_ms = [1000 * x for x in setup_latencies(work / "sip.pcap", sip_port)]
    return {
        "benchmark": "sip-setup",
        "cps": cps,
        "calls": calls,
        "loop": "uvloop" if uvloop else "asyncio",
        "load_average": load_average(),
        "sipp": _sipp_summary(result, calls),
        "answered_on_wire": len(lat_ms),
        "wire_ms": {
            "p50": round(percentile(lat_ms, 50), 3),
            "p95": round(percentile(lat_ms, 95), 3),
            "p99": round(percentile(lat_ms, 99), 3),
            "max": round(max(lat_ms), 3) if lat_ms else float("nan"),
        },
        "kefu_histogram_ms": {
            "p50": round(1000 * histogram_quantile(hist, 0.50), 3),
            "p95": round(1000 * histogram_quantile(hist, 0.95), 3),
            "p99": round(1000 * histogram_quantile(hist, 0.99), 3),
            "count": hist[-1][1] if hist else 0,
            "buckets": {f"{le:g}": c for le, c in hist},
        },
        "kefu_cpu_pct": round(cpu_percent(a, b, "kefu"), 2),
    }


def setup_row(s: dict[str, Any]) -> str:
    w, h = s["wire_ms"], s["kefu_histogram_ms"]
    return (
        f"| {s['cps']:g} | {s['calls']} | {s['loop']} "
        f"| {s['sipp']['successful']}/{s['sipp']['failed']} "
        f"| {w['p50']:.2f} | {w['p95']:.2f} | {w['p99']:.2f} | {w['max']:.2f} "
        f"| {h['p50']:.2f} / {h['p99']:.2f} | {s['kefu_cpu_pct']:.1f} "
        f"| {' '.join(str(x) for x in s['load_average'])} |"
    )


SETUP_HEADER = (
    "| cps | calls | loop | SIPp ok/failed | wire p50 ms | p95 | p99 | max "
    "| kefu histogram p50/p99 ms | kefu CPU % | load avg |\n" + "|" + " --- |" * 11
)

"""The local-cluster tooling without a network: Kamailio's configuration check, the dispatcher
list and its state as kamcmd prints it, RTP ranges, the recorded-process guards, the command
line's answers when no cluster runs, and the failover benchmark's reading of a SIPp trace.

The cluster itself (Kamailio, Redis, kefu nodes, SIPp) runs in tests/e2e/test_cluster_sip.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest import cluster_procs
from loadtest.cluster import main, rtp_range
from loadtest.cluster_failover import CallTrace, parse_message_trace, summarize_failover
from loadtest.kamailio import (
    KAMAILIO_CFG,
    find_binary,
    kamailio_command,
    parse_dispatcher_list,
    write_dispatcher_list,
)

ROOT = Path(__file__).resolve().parents[2]

# What `kamcmd dispatcher.list` printed for a cluster of two nodes, one of them killed.
KAMCMD_LIST = """{
\tNRSETS: 1
\tRECORDS: {
\t\tSET: {
\t\t\tID: 1
\t\t\tTARGETS: {
\t\t\t\tDEST: {
\t\t\t\t\tURI: sip:127.0.0.1:52333
\t\t\t\t\tFLAGS: IP
\t\t\t\t\tPRIORITY: 0
\t\t\t\t}
\t\t\t\tDEST: {
\t\t\t\t\tURI: sip:127.0.0.1:58486
\t\t\t\t\tFLAGS: AP
\t\t\t\t\tPRIORITY: 0
\t\t\t\t}
\t\t\t}
\t\t}
\t}
}
"""


@pytest.mark.skipif(find_binary("kamailio") is None, reason="kamailio is not installed")
@pytest.mark.parametrize("defines", [{}, {"SIP_PORT": 15060, "FR_TIMER": 1000}])
def test_kamailio_cfg_passes_kamailio_check(tmp_path: Path, defines: dict[str, int]) -> None:
    ds_list = tmp_path / "dispatcher.list"
    write_dispatcher_list(ds_list, ["127.0.0.1:5070"])
    cmd = kamailio_command(
        tmp_path,
        host="127.0.0.1",
        port=5060,
        ds_list=ds_list,
        ctl=f"unix:{tmp_path / 'k.ctl'}",
        defines=defines,
    )
    cmd.insert(1, "-c")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and "config file ok" in done.stderr, done.stderr[-2000:]


def test_cfg_makes_every_deployment_value_a_define() -> None:
    text = KAMAILIO_CFG.read_text()
    for name in (
        "SIP_IP",
        "SIP_PORT",
        "DS_LIST",
        "DS_PING_INTERVAL",
        "CTL_SOCKET",
        "PIKE_DENSITY",
        "PIKE_UNIT",
        "BAN_SECONDS",
        "FR_TIMER",
    ):
        assert f"#!trydef {name} " in text, name
    assert 'modparam("dispatcher", "ds_ping_reply_codes", "class=2")' in text


def test_dispatcher_list_and_state() -> None:
    assert parse_dispatcher_list(KAMCMD_LIST) == {
        "sip:127.0.0.1:52333": "IP",
        "sip:127.0.0.1:58486": "AP",
    }


def test_dispatcher_list_file(tmp_path: Path) -> None:
    path = tmp_path / "d.list"
    write_dispatcher_list(path, ["127.0.0.1:5070", "sip:127.0.0.1:5080"], active=["127.0.0.1:5080"])
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["1 sip:127.0.0.1:5070 9 0", "1 sip:127.0.0.1:5080 0 0"]


@pytest.mark.parametrize("nodes", [1, 2, 3, 7])
def test_rtp_ranges_are_disjoint_even_and_inside_kefus_range(nodes: int) -> None:
    ranges = [tuple(map(int, rtp_range(k, nodes).split("-"))) for k in range(1, nodes + 1)]
    for lo, hi in ranges:
        assert lo % 2 == 0 and hi % 2 == 1 and 20000 <= lo < hi <= 29999
    for (_, hi), (lo, _) in zip(ranges, ranges[1:], strict=False):
        assert hi < lo


def test_secret_is_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "jwt-secret"
    assert cluster_procs.write_secret(path, "first") == "first"
    assert path.stat().st_mode & 0o777 == 0o600
    assert cluster_procs.write_secret(path, "second") == "first"


def test_recorded_pid_is_trusted_only_with_its_start_time() -> None:
    me = os.getpid()
    start = cluster_procs.proc_start(me)
    assert start is not None and cluster_procs.alive(me, start)
    assert not cluster_procs.alive(me, start + 1)  # same PID, another process
    child = subprocess.Popen(["sleep", "30"])
    child_start = cluster_procs.proc_start(child.pid)
    assert cluster_procs.alive(child.pid, child_start)
    assert cluster_procs.stop_pid(child.pid, child_start, grace=5.0)
    child.wait(timeout=5)


def test_cli_without_a_cluster(tmp_path: Path) -> None:
    assert main(["status", "--dir", str(tmp_path)]) == 2
    assert main(["stop", "--dir", str(tmp_path)]) == 2
    script = subprocess.run(
        [str(ROOT / "scripts" / "cluster.sh")], capture_output=True, text=True, check=False
    )
    assert script.returncode == 2 and "start --nodes N" in script.stdout


def test_cli_module_help() -> None:
    bench = subprocess.run(
        [sys.executable, "-m", "loadtest.cluster_failover", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bench.returncode == 0 and "--fr-timer" in bench.stdout and "--capacity" in bench.stdout
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.cluster", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "start" in done.stdout and "stop" in done.stdout


def _msg(stamp: str, direction: str, first: str, call: str, cseq: str, contact: str = "") -> str:
    extra = f"Contact: <sip:kefu@{contact};transport=udp>\n" if contact else ""
    return (
        f"----------------------------------------------- 2026-12-05 01:00:{stamp}\n"
        f"UDP message {direction}:\n\n{first}\nVia: SIP/2.0/UDP 127.0.0.1:5060\n"
        f"Call-ID: {call}\nCSeq: {cseq}\n{extra}Content-Length: 0\n\n\n"
    )


def test_failover_reading_of_a_sipp_trace() -> None:
    node1, node2 = "127.0.0.1:40001", "127.0.0.1:40002"
    trace = "".join(
        [
            # answered by node 2 before the kill, its BYE never answered: lost in progress
            _msg("00.000000", "sent (500 bytes)", "INVITE sip:s@x SIP/2.0", "1-1@h", "1 INVITE"),
            _msg("00.010000", "received [300] bytes", "SIP/2.0 200 OK", "1-1@h", "1 INVITE", node2),
            _msg("02.000000", "received [300] bytes", "SIP/2.0 408 Timeout", "1-1@h", "2 BYE"),
            # sent after the kill, waited on node 2, answered by node 1 1.5 s later
            _msg("01.100000", "sent (500 bytes)", "INVITE sip:s@x SIP/2.0", "2-1@h", "1 INVITE"),
            _msg("02.600000", "received [300] bytes", "SIP/2.0 200 OK", "2-1@h", "1 INVITE", node1),
            _msg("04.000000", "received [300] bytes", "SIP/2.0 200 OK", "2-1@h", "2 BYE"),
            # sent after the kill straight to node 1
            _msg("01.200000", "sent (500 bytes)", "INVITE sip:s@x SIP/2.0", "3-1@h", "1 INVITE"),
            _msg("01.205000", "received [300] bytes", "SIP/2.0 200 OK", "3-1@h", "1 INVITE", node1),
            _msg("03.000000", "received [300] bytes", "SIP/2.0 200 OK", "3-1@h", "2 BYE"),
        ]
    )
    calls = parse_message_trace(trace)
    assert set(calls) == {"1-1@h", "2-1@h", "3-1@h"}
    assert calls["2-1@h"].node == node1 and calls["2-1@h"].bye_ok
    assert calls["1-1@h"].node == node2 and not calls["1-1@h"].bye_ok
    killed_at = calls["1-1@h"].invite_at + 1.0
    out = summarize_failover(calls, killed_at, node2, node1, waited_s=0.75)
    assert (out["attempted"], out["succeeded"], out["failed"]) == (3, 2, 1)
    assert out["in_progress_lost_on_killed_node"] == 1
    assert (out["new_calls_after_kill"], out["new_calls_failed"]) == (2, 0)
    assert out["failed_over"] == 1
    assert out["first_failover_answer_s"] == pytest.approx(1.6, abs=1e-3)
    assert out["first_new_call_answered_by_survivor_s"] == pytest.approx(0.205, abs=1e-3)


def test_failover_trace_counts_a_failed_new_call() -> None:
    calls = {"a": CallTrace(invite_at=10.0, final_status=503)}
    out = summarize_failover(calls, 9.0, "n2", "n1", waited_s=0.75)
    assert out["new_calls_failed"] == 1 and out["new_call_failure_window_s"] == [1.0, 1.0]

"""Kamailio (deploy/kamailio/kamailio.cfg) in front of two kefu nodes in echo mode, with
Redis, as ``loadtest.cluster`` starts them; SIPp callers reach the nodes only through it.

Checked on the real peers: calls are spread over both nodes and their ACK and BYE pass
through Kamailio (record-route); Kamailio answers OPTIONS addressed to it; a node answering
OPTIONS 503 (draining) leaves the rotation and returns when it answers 200; an INVITE
answered 503 fails over to the next node; a node killed with SIGKILL is marked inactive and
new calls all succeed. Every wait is on a condition under a generous deadline.

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 .venv/bin/python -m pytest
tests/e2e/test_cluster_sip.py -q'``.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest import cluster_procs
from loadtest.cluster import Cluster, Node, missing_peers, start_cluster
from loadtest.kamailio import start_kamailio
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import (
    SippProcess,
    SippResult,
    run_sipp,
    sipp_media_port,
    sipp_result,
    start_sipp_uas,
    take_ports,
)

MISSING = missing_peers()
pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        bool(MISSING), reason=f"{', '.join(MISSING)} not installed (./scripts/setup.sh --test)"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
PROBE_DEADLINE = 15.0
"""Generous bound for Kamailio to notice a change: probes go out every second, a silent
node is given up after 1.5 s (kamailio.cfg FR_TIMER); a loaded CI box only makes it later."""


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("pcap") / "speech.pcap"
    seconds = make_rtp_pcap(path, speech_like_pcm(0.5))
    return path, int(seconds * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cluster"), nodes=2) as running:
        yield running


def place_calls(entry: str, speech: tuple[Path, int], calls: int, rate: float) -> SippResult:
    """``calls`` SIPp echo calls (0.5 s of speech, then BYE) to ``entry`` at ``rate``/s."""
    pcap, audio_ms = speech
    return run_sipp(
        "uac_echo",
        entry,
        calls=calls,
        rate=rate,
        media_port=sipp_media_port(),
        keys={"pcap": pcap},
        variables={"audio_ms": audio_ms},
        timeout=30 + calls / rate,
    )


def counters(node: Node) -> dict[str, float]:
    return {
        "completed": node.metric("kefu_calls_total", 'result="completed"'),
        "invite": node.metric("kefu_sip_requests_total", 'method="INVITE"'),
        "ack": node.metric("kefu_sip_requests_total", 'method="ACK"'),
        "bye": node.metric("kefu_sip_requests_total", 'method="BYE"'),
    }


def wait_idle(node: Node, timeout: float = 15.0) -> None:
    """Until the node has no call left (its BYEs are processed)."""
    deadline = time.monotonic() + timeout
    while node.metric("kefu_active_calls") > 0:
        assert time.monotonic() < deadline, f"{node.id} still has calls"
        time.sleep(0.05)


def ended_reasons(node: Node, skip: int) -> list[str]:
    assert node.process is not None
    return [e["reason"] for e in node.process.events("call_ended")[skip:]]


def test_calls_spread_over_both_nodes_and_end_through_kamailio(
    cluster: Cluster, speech: tuple[Path, int]
) -> None:
    nodes = list(cluster.nodes.values())
    before = {n.k: counters(n) for n in nodes}
    logged = {n.k: len(ended_reasons(n, 0)) for n in nodes}
    result = place_calls(cluster.entry, speech, calls=20, rate=10)
    assert result.ok and result.successful == 20, result.errors or result.stderr_tail
    for node in nodes:
        wait_idle(node)
    delta = {n.k: {k: v - before[n.k][k] for k, v in counters(n).items()} for n in nodes}
    assert sum(d["completed"] for d in delta.values()) == 20, delta
    for node in nodes:
        got = delta[node.k]
        assert got["completed"] > 0, f"round-robin left {node.id} out: {delta}"
        # the ACK and the BYE reached the node that answered: SIPp sent them to Kamailio
        # only, along the route set it got in the 200 (Record-Route)
        assert got["ack"] >= got["completed"] and got["bye"] >= got["completed"], delta
        reasons = ended_reasons(node, logged[node.k])
        assert reasons == ["remote hangup"] * int(got["completed"]), reasons


def test_kamailio_answers_options_addressed_to_it(cluster: Cluster) -> None:
    """A trunk's keepalive is answered by Kamailio itself (its Server header), not a node."""
    host, port = cluster.entry.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        sock.settimeout(5)
        me = sock.getsockname()[1]
        sock.sendto(_options(cluster.entry, f"{host}:{me}").encode(), (host, int(port)))
        reply = sock.recv(65535).decode()
    assert reply.startswith("SIP/2.0 200 "), reply
    assert re.search(r"^Server: kefu-front", reply, re.MULTILINE), reply
    assert re.search(r"^Allow: .*INVITE", reply, re.MULTILINE), reply


def test_in_dialog_request_to_a_non_node_is_refused(cluster: Cluster) -> None:
    """Kamailio's Record-Route does not make it a relay: a BYE routed through it to an
    address that is no kefu node is refused."""
    host, port = cluster.entry.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        sock.settimeout(5)
        local = f"{host}:{sock.getsockname()[1]}"
        bye = (
            f"BYE sip:victim@127.0.0.9:5060 SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP {local};branch=z9hG4bK-relay-{time.monotonic_ns()}\r\n"
            f"Route: <sip:{cluster.entry};lr>\r\n"
            "Max-Forwards: 70\r\n"
            f"From: <sip:a@{local}>;tag=a1\r\n"
            "To: <sip:victim@127.0.0.9>;tag=b1\r\n"
            f"Call-ID: relay-{time.monotonic_ns()}@{local}\r\n"
            "CSeq: 2 BYE\r\n"
            "Content-Length: 0\r\n\r\n"
        )
        sock.sendto(bye.encode(), (host, int(port)))
        reply = sock.recv(65535).decode()
    assert reply.startswith("SIP/2.0 403 "), reply


def _options(target: str, local: str, n: int = 0) -> str:
    return (
        f"OPTIONS sip:{target} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {local};branch=z9hG4bK-keepalive-{time.monotonic_ns()}-{n}\r\n"
        "Max-Forwards: 70\r\n"
        f"From: <sip:trunk@{local}>;tag=ka1\r\n"
        f"To: <sip:{target}>\r\n"
        f"Call-ID: keepalive-{time.monotonic_ns()}-{n}@{local}\r\n"
        "CSeq: 1 OPTIONS\r\n"
        "Content-Length: 0\r\n\r\n"
    )


def _options_burst(target: str, source: str, count: int, quiet: float = 1.0) -> int:
    """Send ``count`` OPTIONS from ``source`` at once; how many got a 200 before ``quiet``
    seconds passed without a reply (a fixed wait: it proves that nothing more comes)."""
    host, port = target.rsplit(":", 1)
    answered = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((source, 0))
        local = f"{source}:{sock.getsockname()[1]}"
        for n in range(count):
            sock.sendto(_options(target, local, n).encode(), (host, int(port)))
        sock.settimeout(quiet)
        try:
            while True:
                answered += sock.recv(65535).startswith(b"SIP/2.0 200 ")
        except TimeoutError:
            pass
    return answered


def test_flooding_source_is_banned_for_a_while_and_others_are_not(
    cluster: Cluster, tmp_path: Path
) -> None:
    """pike + the ban table, with small limits on a Kamailio of its own (in front of the same
    nodes) so that the module's Kamailio never bans the tests' 127.0.0.1."""
    limits = {"PIKE_UNIT": 1, "PIKE_DENSITY": 20, "BAN_SECONDS": 2}
    nodes = [n.sip for n in cluster.nodes.values()]
    kam = start_kamailio(tmp_path / "kamailio", take_ports(), nodes, defines=limits)
    try:
        assert _options_burst(kam.sip, "127.0.0.2", 1) == 1
        flood = _options_burst(kam.sip, "127.0.0.2", 400)
        # pike blocks between PIKE_DENSITY and three times it per unit (README.pike); the
        # bound is loose for a burst that a loaded box spreads over more than one unit
        assert flood < 200, flood
        assert _options_burst(kam.sip, "127.0.0.2", 1) == 0, "the flooder is not banned"
        assert _options_burst(kam.sip, "127.0.0.1", 5) == 5, "another source was hit"
        deadline = time.monotonic() + 30
        while _options_burst(kam.sip, "127.0.0.2", 1, quiet=0.5) == 0:
            assert time.monotonic() < deadline, "the ban never ended"
        assert "flood from 127.0.0.2" in kam.log_tail(100_000)
    finally:
        kam.stop()


def _stand_in(port: int, options_answer: int) -> SippProcess:
    """A node that takes no calls (INVITE 503) and answers OPTIONS with ``options_answer``."""
    return start_sipp_uas(
        "uas_node_status",
        port=port,
        rtp_echo=False,
        variables={"options_answer": options_answer},
    )


def _answered(uas: SippProcess) -> int:
    """OPTIONS and INVITEs the stand-in has answered so far (SIPp's per-second counters)."""
    return sipp_result(0, uas.workdir).successful


def _invites(result: SippResult) -> int:
    """INVITEs a SIPp UAS received, from its final screen (``----------> INVITE  N``)."""
    rows = re.findall(r"^\s+-+> +INVITE\s+(\d+)", result.screen, re.MULTILINE)
    return sum(int(n) for n in rows)


def test_node_answering_options_503_leaves_rotation_and_comes_back(
    cluster: Cluster, speech: tuple[Path, int]
) -> None:
    port = take_ports()
    dest = f"127.0.0.1:{port}"
    nodes = {n.sip: True for n in cluster.nodes.values()}
    draining = _stand_in(port, 503)
    try:
        # enters as an active destination, answers its probe 503: out of rotation
        cluster.set_destinations([dest], active=True)
        cluster.wait_dispatcher({dest: False, **nodes}, PROBE_DEADLINE)
        # and stays out while it keeps answering (a 503 taken as alive would bring it back)
        seen = _answered(draining)
        deadline = time.monotonic() + PROBE_DEADLINE
        while _answered(draining) < seen + 2:
            assert time.monotonic() < deadline, "the draining stand-in got no more probes"
            time.sleep(0.1)
        assert cluster.dispatcher_state()[dest].startswith("I"), cluster.dispatcher_state()
        result = place_calls(cluster.entry, speech, calls=12, rate=10)
    finally:
        stand_in = draining.stop()
    assert result.ok and result.successful == 12, result.errors or result.stderr_tail
    assert _invites(stand_in) == 0, "Kamailio sent INVITEs to a draining node"
    assert stand_in.successful > 0, "the draining stand-in answered no probe"

    full = _stand_in(port, 200)
    try:
        # answers OPTIONS 200 again: back in rotation
        cluster.wait_dispatcher({dest: True, **nodes}, PROBE_DEADLINE)
        # it takes its turn of the round-robin, answers 503, the call goes to the next node
        result = place_calls(cluster.entry, speech, calls=12, rate=10)
    finally:
        stand_in = full.stop()
        cluster.set_destinations([])
    assert result.ok and result.successful == 12, result.errors or result.stderr_tail
    assert _invites(stand_in) > 0, "the round-robin never chose the full node"
    assert dest not in cluster.dispatcher_state()


def test_killed_node_is_marked_inactive_and_new_calls_succeed(
    tmp_path: Path, speech: tuple[Path, int]
) -> None:
    """SIGKILL one of two nodes: calls placed at once still succeed (a call sent to the dead
    node is tried on the other after FR_TIMER), Kamailio marks it inactive, and every new
    call goes to the survivor."""
    with start_cluster(tmp_path / "cluster", nodes=2) as cluster:
        survivor, victim = cluster.nodes[1], cluster.nodes[2]
        before = survivor.metric("kefu_calls_total", 'result="completed"')
        cluster.kill_node(2, signal.SIGKILL)
        at_once = place_calls(cluster.entry, speech, calls=10, rate=10)
        cluster.wait_dispatcher({victim.sip: False, survivor.sip: True}, PROBE_DEADLINE)
        after = place_calls(cluster.entry, speech, calls=50, rate=25)
        wait_idle(survivor)
        completed = survivor.metric("kefu_calls_total", 'result="completed"') - before
    assert at_once.ok and at_once.successful == 10, at_once.errors or at_once.stderr_tail
    assert after.ok and after.successful == 50, after.errors or after.stderr_tail
    assert completed == 60


def _cluster_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadtest.cluster", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _processes_of(directory: Path) -> list[int]:
    """PIDs whose command line or environment names ``directory`` (a cluster's processes:
    Kamailio and Redis name it in their arguments, kefu nodes in KEFU_SERVER_STATE_DIR)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or cluster_procs.proc_start(int(proc.name)) is None:
            continue
        try:
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(directory).encode() in text:
            found.append(int(proc.name))
    return found


def test_command_line_start_status_stop(tmp_path: Path) -> None:
    directory = tmp_path / "cli"
    started = _cluster_cli("start", "--nodes", "1", "--dir", str(directory))
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        lines = started.stdout.strip().splitlines()
        assert len(lines) == 1, started.stdout
        info = json.loads(lines[0])
        assert info["dir"] == str(directory) and info["redis"].startswith("unix://")
        assert [n["id"] for n in info["nodes"]] == ["node-1"]
        recorded = json.loads((directory / "cluster.json").read_text())
        assert {k: recorded[k] for k in info} == info
        assert (directory / "jwt-secret").stat().st_mode & 0o777 == 0o600

        status = _cluster_cli("status", "--dir", str(directory))
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["alive"] and report["kamailio_alive"] and report["redis_alive"]
        assert report["nodes"][0]["alive"] and report["nodes"][0]["dispatcher"] == "AP"
    finally:
        stopped = _cluster_cli("stop", "--dir", str(directory))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    pids = [info["kamailio_pid"], info["redis_pid"], info["nodes"][0]["pid"]]
    assert not [p for p in pids if cluster_procs.proc_start(p) is not None]
    assert _cluster_cli("status", "--dir", str(directory)).returncode == 2


def test_command_line_start_failure_names_kamailio_and_leaves_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "taken"
    port = take_ports()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", port))
        started = _cluster_cli(
            "start", "--nodes", "1", "--dir", str(directory), "--sip-port", str(port)
        )
    assert started.returncode == 1, started.stdout + started.stderr
    assert "kamailio failed to start" in started.stderr, started.stderr[-3000:]
    assert "Address already in use" in started.stderr, started.stderr[-3000:]
    assert started.stdout == ""
    assert not (directory / "cluster.json").exists()
    assert _processes_of(directory) == []

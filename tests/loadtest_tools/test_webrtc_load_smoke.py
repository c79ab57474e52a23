"""Smoke test of ``python -m loadtest webrtc-load``: 2 rooms x 2 participants for 3 s.

Runs the real tool (kefu started by it, clients in worker processes) inside the private
network namespace, then checks the JSON summary's keys and that its values are sane. The
Janus comparison runs only where Debian's ``janus`` is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtest.webrtc_load_client import StreamTally

ROOT = Path(__file__).resolve().parents[2]

KEYS = {
    "benchmark",
    "server",
    "rooms",
    "per_room",
    "participants",
    "streams",
    "joined",
    "join_errors",
    "streams_missing",
    "connect_ms",
    "packets",
    "loss_pct",
    "server_cpu_pct",
    "server_cpu_pct_per_participant",
    "server_us_per_forwarded_packet",
    "server_rss_mib",
    "server_counters_delta",
    "worker_cpu_pct",
    "load_avg",
    "pass",
}


def _run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    out = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "loadtest", "webrtc-load", "--start-kefu"]
    cmd += ["--rooms", "2", "--per-room", "2", "--seconds", "3", "--warmup", "0.5"]
    cmd += ["--json", str(out), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _check_sane(s: dict[str, Any], server: str) -> None:
    assert KEYS <= s.keys()
    assert s["server"] == server
    assert (s["rooms"], s["per_room"], s["participants"], s["streams"]) == (2, 2, 4, 4)
    assert s["joined"] == 4 and s["join_errors"] == [] and s["streams_missing"] == 0
    assert 0 < s["connect_ms"]["p50"] <= s["connect_ms"]["p99"] < 5000
    # 4 streams x 50 packets/s x 3 s, with slack for a loaded CI machine
    assert s["packets"]["received"] > 400
    assert 0 <= s["loss_pct"]["missing"] < 5
    assert 0 < s["server_cpu_pct"] < 200
    assert 5 < s["server_rss_mib"] < 2000
    assert len(s["worker_cpu_pct"]) == 2
    assert s["pass"] is True


@pytest.mark.netns
def test_webrtc_load_kefu(tmp_path: Path) -> None:
    s = _run(tmp_path)
    _check_sane(s, "kefu")
    # kefu's own counters agree that it forwarded what the clients heard (the window edges
    # differ by a few packets in flight)
    forwarded = s["server_counters_delta"]["forwarded"]
    assert abs(forwarded - s["packets"]["received"]) < 0.1 * forwarded
    assert s["server_counters_delta"]["dropped"] == 0


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("janus") is None, reason="Debian janus is not installed")
def test_webrtc_load_compare_janus(tmp_path: Path) -> None:
    s = _run(tmp_path, "--compare-janus")
    assert s["benchmark"] == "webrtc-load-compare"
    _check_sane(s["kefu"], "kefu")
    assert "error" not in s["janus"], s["janus"]
    _check_sane(s["janus"], "janus")


def test_stream_tally_unwraps_and_ignores_late_packets() -> None:
    tally = StreamTally()
    for seq, ts in ((65534, 2**32 - 960), (65535, 0), (1, 1920), (0, 960)):
        tally.add(seq, ts)
    received, highest_seq, highest_ts = tally.snapshot()
    assert received == 4
    assert highest_seq == 65534 + 3  # unwrapped past 65535; the late 0 did not move it back
    assert highest_ts == 2**32 - 960 + 3 * 960


def test_cli_help_lists_webrtc_load() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest", "webrtc-load", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    assert "--find-max" in proc.stdout and "--compare-janus" in proc.stdout

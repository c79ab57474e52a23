"""Smoke tests of ``python -m loadtest`` benchmarks: tiny runs, the JSON has sane values.

The real numbers live in docs/BENCHMARKS.md; these only prove each subcommand still runs
end to end (kefu, SIPp, tshark, rtpengine as child processes) and reports what it should.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.rtp_relay import bdecode, bencode
from loadtest.sip_load import histogram_quantile, parse_histogram, parse_rtp_stats, percentile

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, timeout: float = 60) -> dict:
    out = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "| --- |" in proc.stdout  # the Markdown header and row were printed
    return json.loads(out.read_text())


@pytest.mark.netns
@pytest.mark.peer
def test_sip_echo_smoke(tmp_path: Path) -> None:
    s = _run(tmp_path, "sip-echo", "--calls", "5", "--hold", "3", "--sample", "3")
    assert s["sipp"] == {**s["sipp"], "ok": True, "successful": 5, "failed": 0}
    assert s["inbound"]["calls_logged"] == 5
    assert s["inbound"]["packets_received"] >= 5 * 140  # 150 packets a call, 3 s each
    assert s["inbound"]["loss_pct"] < 1
    assert s["echo"]["streams"] == 3 and s["echo"]["packets_expected"] >= 3 * 140
    assert 0 <= s["echo"]["jitter_p99_ms"] < 200  # a sane number in ms; its size is the bench's
    assert s["kefu"]["rss_steady_mib"] > 10 and s["kefu"]["steady_cpu_pct"] >= 0
    assert s["kefu"]["pid_exit"] == 0
    # Not s["pass"]: one skipped frame is 0.7 % of a 3 s call, and a loaded CI box skips some.
    assert s["echo"]["missing_pct"] < 10 and isinstance(s["pass"], bool)


@pytest.mark.netns
@pytest.mark.peer
def test_sip_setup_smoke(tmp_path: Path) -> None:
    s = _run(tmp_path, "sip-setup", "--cps", "20", "--calls", "20")
    assert s["sipp"]["ok"] and s["answered_on_wire"] == 20
    w = s["wire_ms"]
    assert 0 < w["p50"] <= w["p95"] <= w["p99"] <= w["max"] < 1000
    assert s["kefu_histogram_ms"]["count"] == 20


@pytest.mark.netns
@pytest.mark.peer
@pytest.mark.skipif(shutil.which("rtpengine") is None, reason="rtpengine-daemon not installed")
def test_rtp_relay_smoke(tmp_path: Path) -> None:
    s = _run(tmp_path, "rtp-relay", "--streams", "3", "--seconds", "2")
    for relay in ("kefu", "rtpengine"):
        r = s[relay]
        assert r["packets_sent"] >= 3 * 90  # 50 pps for 2 s, minus a late tick or two
        assert r["loss_pct"] < 5
        assert r["cpu_us_per_packet"] >= 0


def test_bencode_round_trip() -> None:
    msg = {"command": "offer", "call-id": "x", "flags": ["a", "b"], "n": 3, "raw": b"\xff"}
    data = bencode(msg)
    assert data.startswith(b"d7:call-id1:x7:command5:offer")  # keys sorted (BEP 3)
    assert bdecode(data) == {**msg, "raw": b"\xff"}
    with pytest.raises(ValueError):
        bdecode(b"d3:abc")


def test_parsers() -> None:
    stats = parse_rtp_stats(
        "RtpStats(packets_received=150, packets_lost=-1, jitter_ms=3.3e-11, latched_address=None)"
    )
    assert stats == {"packets_received": 150.0, "packets_lost": -1.0, "jitter_ms": 3.3e-11}
    metrics = (
        'h_bucket{le="0.01"} 5.0\nh_bucket{le="0.02"} 10.0\nh_bucket{le="+Inf"} 10.0\nh_count 10\n'
    )
    buckets = parse_histogram(metrics, "h")
    assert buckets == [(0.01, 5.0), (0.02, 10.0), (float("inf"), 10.0)]
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.01)
    assert histogram_quantile(buckets, 0.75) == pytest.approx(0.015)
    assert percentile([3, 1, 2, 4], 50) == 2 and percentile([], 50) != percentile([], 50)

"""Shared fixtures: a real ``kefu serve`` process, the network-namespace guard, and the
summary of the tiers a run skipped (docs/TESTING.md).

Tests that open sockets towards peers are marked ``netns``; they run only inside the private
network namespace that ``scripts/test.sh`` creates (KEFU_NETNS=1), so nothing they do can
leave the machine. A run that skips a whole tier (no namespace, a missing peer binary, a
missing model or native package) says so at the end, loudly, with how to run it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest import kefu_process
from loadtest.kefu_process import KefuProcess

__all__ = ["IN_NETNS", "KefuProcess", "start_kefu"]

IN_NETNS = os.environ.get("KEFU_NETNS") == "1"
_OWN_AI_CACHE = pytest.StashKey[str]()


NETNS_REASON = "netns tier: needs a private network namespace (run ./scripts/test.sh)"

# (tier, what it covers, how to get it, pattern of its skip reasons); first match wins.
TIERS = (
    ("netns", "real peers: SIPp, baresip, tshark, Chromium, coturn, kefu on loopback",
     "run ./scripts/test.sh (pytest inside unshare -n)", re.escape(NETNS_REASON)),
    ("peer binaries", "tests whose Debian peer is not installed",
     "./scripts/setup.sh --test (apt-get install sip-tester baresip tshark chromium coturn"
     " kamailio redis-server ...)",
     r"not installed|needs (baresip|sipp|tshark)|playwright-core|node is not"),
    ("models / native packages", "AI stages whose model or library is missing",
     "./scripts/setup.sh --test (installs the model packages, builds speexdsp)",
     r"model|deepfilternet|speexdsp|weights|HF_HUB"),
)  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """One AI cache for the session (KEFU_AI_CACHE_DIR): every kefu a test starts and the
    in-process dialog fixtures share the sentence vectors and scorer weights the first AI
    start computes (~1 min on 2 cores) instead of each computing them in its own state dir.
    The files are keyed by content and written atomically, so sharing changes no result."""
    if "KEFU_AI_CACHE_DIR" not in os.environ:
        path = tempfile.mkdtemp(prefix="kefu-ai-cache-")
        os.environ["KEFU_AI_CACHE_DIR"] = path
        config.stash[_OWN_AI_CACHE] = path


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_OWN_AI_CACHE, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IN_NETNS:
        return
    skip = pytest.mark.skip(reason=NETNS_REASON)
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> str:
    if IN_NETNS:
        return "kefu tiers: inside a private network namespace (KEFU_NETNS=1): netns tier runs"
    return "kefu tiers: NOT in a private network namespace: the netns tier (real peers) is skipped"


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One loud banner per skipped tier, so a green run cannot hide a tier that never ran."""
    counts: dict[str, dict[str, int]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = _skip_reason(report)
        for tier, _, _, pattern in TIERS:
            if re.search(pattern, reason, re.IGNORECASE):
                counts.setdefault(tier, {})
                counts[tier][reason] = counts[tier].get(reason, 0) + 1
                break
    if not counts:
        return
    tr = terminalreporter
    tr.write_sep("!", "SKIPPED TIERS: this run did NOT test everything", red=True, bold=True)
    for tier, covers, fix, _ in TIERS:
        if tier not in counts:
            continue
        total = sum(counts[tier].values())
        line = f"SKIPPED TIER: {total} {tier} tests ({covers}) -- {fix}"
        tr.write_line(line, red=True, bold=True)
        for reason, n in sorted(counts[tier].items(), key=lambda kv: -kv[1]):
            tr.write_line(f"    {n:4d} x {reason}", red=True)
    tr.write_sep("!", "see docs/TESTING.md for the tiers", red=True, bold=True)


def start_kefu(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> KefuProcess:
    """kefu on ephemeral loopback ports, in echo mode, its state under ``tmp_path``, as one
    process: tests about room workers ask for them (KEFU_WEBRTC_ROOM_WORKERS); a worker per
    core would load every AI model once more and double start-up on a 2-core CI box."""
    defaults = {
        "KEFU_CALLS_MEDIA_MODE": "echo",
        "KEFU_WEBRTC_ROOM_WORKERS": "1",
        "KEFU_CALLS_DRAIN_TIMEOUT": "2",
        "KEFU_SERVER_STATE_DIR": str(tmp_path / "state"),
    }
    return kefu_process.start_kefu(tmp_path, *args, env={**defaults, **(env or {})})


@pytest.fixture
def kefu(tmp_path: Path) -> Iterator[KefuProcess]:
    server = start_kefu(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def kefu_factory(tmp_path: Path) -> Iterator[object]:
    started: list[KefuProcess] = []

    def factory(*args: str, env: dict[str, str] | None = None) -> KefuProcess:
        server = start_kefu(tmp_path, *args, env=env)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()

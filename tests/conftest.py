"""Shared fixtures: a real ``kefu serve`` process, and the network-namespace guard.

Tests that open sockets towards peers are marked ``netns``; they run only inside the private
network namespace that ``scripts/test.sh`` creates (KEFU_NETNS=1), so nothing they do can
leave the machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest import kefu_process
from loadtest.kefu_process import KefuProcess

__all__ = ["IN_NETNS", "KefuProcess", "start_kefu"]

IN_NETNS = os.environ.get("KEFU_NETNS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IN_NETNS:
        return
    skip = pytest.mark.skip(reason="needs a private network namespace (run scripts/test.sh)")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


def start_kefu(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> KefuProcess:
    """kefu on ephemeral loopback ports, in echo mode, its state under ``tmp_path``."""
    defaults = {
        "KEFU_CALLS_MEDIA_MODE": "echo",
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

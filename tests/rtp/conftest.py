"""pytest wiring for the RTP tests: netns-only tests skip outside a private namespace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that send packets run only inside a private network namespace:
    # unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/rtp'
    if os.environ.get("KEFU_NETNS") == "1":
        return
    skip = pytest.mark.skip(reason="needs a private netns (unshare -n, KEFU_NETNS=1)")
    for item in items:
        if "netns" in item.keywords and _HERE in item.path.parents:
            item.add_marker(skip)

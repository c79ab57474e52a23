"""A private redis-server (Unix socket only) for the cluster tests; skipped without one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.redis_peer import RedisPeer, redis_missing, start_redis


@pytest.fixture
def redis_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisPeer]:
    reason = redis_missing()
    if reason:
        pytest.skip(f"{reason} (peer binaries: ./scripts/setup.sh --test)")
    peer = start_redis(Path(tmp_path_factory.mktemp("redis")))
    yield peer
    peer.stop()

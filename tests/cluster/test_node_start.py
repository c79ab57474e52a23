"""A node's start with Redis configured: bad settings, Redis absent (required or not), lost
and back while the node serves."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import start_kefu

from kefu.errors import ConfigError
from kefu.mediaserver.config import load_config
from loadtest.redis_peer import RedisPeer


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"KEFU_STATE_REDIS_URL": "http://redis:6379"}, "state.redis_url"),
        ({"KEFU_CLUSTER_NODE_ID": "node 1"}, "cluster.node_id"),
        ({"KEFU_CLUSTER_ADVERTISE_HTTP": "10.0.0.5:8080"}, "cluster.advertise_http"),
        ({"KEFU_CLUSTER_HEARTBEAT_S": "5", "KEFU_CLUSTER_NODE_TTL_S": "5"}, "cluster.heartbeat_s"),
    ],
)
def test_bad_cluster_settings_stop_the_start_naming_the_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ=env)
    assert caught.value.key == key


def test_good_cluster_settings_load() -> None:
    config = load_config(
        environ={
            "KEFU_STATE_REDIS_URL": "redis://:pw@10.0.0.9:6379/2",
            "KEFU_CLUSTER_NODE_ID": "kefu-0",
            "KEFU_CLUSTER_ADVERTISE_HTTP": "http://10.0.0.5:8080",
        }
    )
    assert config.state.redis_url == "redis://:pw@10.0.0.9:6379/2"
    assert (config.cluster.node_id, config.cluster.heartbeat_s) == ("kefu-0", 1.0)


def _readyz(http: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{http}/readyz", timeout=10) as answer:
        return dict(json.loads(answer.read()))


@pytest.mark.netns
def test_a_required_redis_that_is_absent_stops_the_start_naming_its_url(
    tmp_path: Path,
) -> None:
    url = f"unix://{tmp_path}/nobody.sock"
    with pytest.raises(RuntimeError) as caught:
        start_kefu(tmp_path, env={"KEFU_STATE_REDIS_URL": url, "KEFU_CALLS_MEDIA_MODE": "echo"})
    assert f"cannot reach Redis at {url}" in str(caught.value)


@pytest.mark.netns
def test_a_node_runs_degraded_without_redis_and_recovers_when_it_comes_back(
    tmp_path: Path, redis_peer: RedisPeer
) -> None:
    redis_peer.stop()
    env = {
        "KEFU_STATE_REDIS_URL": redis_peer.url,
        "KEFU_STATE_REDIS_REQUIRED": "false",
        "KEFU_CALLS_MEDIA_MODE": "echo",
        "KEFU_CLUSTER_NODE_ID": "lonely",
    }
    kefu = start_kefu(tmp_path, env=env)
    try:
        ready = _readyz(kefu.http)
        assert ready["status"] == "ready" and ready["degraded"] is True
        assert ready["cluster"]["redis"]["up"] is False
        redis_peer.restart()
        deadline = time.monotonic() + 15
        while _readyz(kefu.http)["degraded"] and time.monotonic() < deadline:
            time.sleep(0.2)
        ready = _readyz(kefu.http)
        assert ready["degraded"] is False and ready["cluster"]["redis"]["outages"] >= 1
    finally:
        kefu.stop()

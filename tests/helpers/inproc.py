"""An in-process kefu server's configuration for tests: loopback, ports taken, one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kefu.mediaserver.config import Config, load_config
from loadtest.peers import take_ports

__all__ = ["server_config"]


def server_config(state: Path, **sections: dict[str, Any]) -> Config:
    """SIP and HTTP on loopback ephemeral ports, 20 RTP ports from the test pool, no room
    workers, state under ``state``; ``sections`` add to or override the TOML sections
    (``calls={"media_mode": "prompt"}``)."""
    rtp = take_ports(20, even=True)
    overrides: dict[str, dict[str, Any]] = {
        "sip": {"listen": "127.0.0.1:0"},
        "http": {"listen": "127.0.0.1:0"},
        "rtp": {"ports": f"{rtp}-{rtp + 19}"},
        "calls": {"media_mode": "echo"},
        "webrtc": {"room_workers": 1},
        "server": {"state_dir": str(state)},
    }
    for name, values in sections.items():
        overrides[name] = {**overrides.get(name, {}), **values}
    return load_config(environ={}, overrides=overrides)

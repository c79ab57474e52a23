"""Helpers for the real-browser tests: find Chromium and playwright-core, start kefu with a
known JWT secret, build caller-page URLs, run ``driver.mjs``.

Chromium is Debian's (``apt-get install chromium``); playwright-core comes from the repo's
package.json (``npm ci`` at the repo root, before entering the network namespace: the tests
try ``npm ci`` themselves once and skip with the reason when that fails).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest

from kefu.signaling.tokens import mint_token

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.mjs")
CHROMIUM = os.environ.get("KEFU_CHROMIUM", "/usr/bin/chromium")


def require_chromium() -> str:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not installed at {CHROMIUM} (apt-get install chromium)")
    if shutil.which("node") is None:
        pytest.skip("node is not installed (needed to drive Chromium with playwright-core)")
    if not (REPO / "node_modules" / "playwright-core" / "package.json").exists():
        npm = shutil.which("npm")
        if npm is not None:
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=REPO,
                env={**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"},
                capture_output=True,
                timeout=120,
                check=False,
            )
        if not (REPO / "node_modules" / "playwright-core" / "package.json").exists():
            pytest.skip(
                "playwright-core missing: run `npm ci` at the repo root (outside the netns)"
            )
    return CHROMIUM


def kefu_env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], str]:
    """Environment for a test kefu (own state dir, known JWT secret, loopback ICE)."""
    secret = secrets.token_urlsafe(24)
    env = {
        "KEFU_SERVER_STATE_DIR": str(tmp_path / "state"),
        "KEFU_AUTH_JWT_SECRET": secret,
        "KEFU_WEBRTC_ICE_HOST_ADDRESSES": "127.0.0.1",
        **extra,
    }
    return env, secret


def token(secret: str, room: str, user: str | None = None, role: str = "customer") -> str:
    return mint_token(secret, user or f"u-{secrets.token_hex(3)}", role, 600.0, room)


def page_url(http: str, **params: str) -> str:
    """The caller page, starting the call at once. The avatar is off unless a test asks for
    it (``avatar="video"`` or ``"weights"``): rendering and drawing a face costs CPU that
    tests about other things should not share with Whisper on a 2-core box."""
    return f"{http}/?{urlencode({'autostart': '1', 'avatar': 'off', **params})}"


def run_driver(
    tmp_path: Path, callers: list[dict[str, Any]], *, timeout_s: float = 60.0, **spec: Any
) -> dict[str, Any]:
    """Run driver.mjs with ``callers`` (url, wav, fakeUi); returns its JSON result."""
    for i, caller in enumerate(callers):
        caller.setdefault("profile", str(tmp_path / f"profile-{i}-{secrets.token_hex(3)}"))
    path = tmp_path / f"spec-{secrets.token_hex(3)}.json"
    path.write_text(json.dumps({"chromium": CHROMIUM, "callers": callers, **spec}))
    proc = subprocess.run(
        ["node", str(DRIVER), str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(
            f"driver printed nothing (rc {proc.returncode}): {proc.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    assert result.get("ok"), result.get("error")
    return result


def audio_inbound(caller: dict[str, Any]) -> list[dict[str, Any]]:
    stats = caller.get("stats") or {}
    return [s for s in stats.get("inbound", []) if s.get("kind") == "audio"]


def heard(caller: dict[str, Any]) -> list[np.ndarray]:
    """What the page played, one mono 48 kHz int16 array per remote audio track, as the
    driver's tap recorded it (``run_driver(..., record=True)``)."""
    taps = caller.get("heard")
    assert taps is not None, "run the driver with record=True to tap the page's audio"
    for t in taps:
        assert t["error"] is None and t["rate"] == 48000, t
    return [np.frombuffer(base64.b64decode(t["pcm"]), "<i2").astype(np.int16) for t in taps]

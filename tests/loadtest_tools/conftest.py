"""Fixtures for the loadtest tooling tests: generated audio and pcaps, binary guards.

The netns guard itself lives in tests/conftest.py (``@pytest.mark.netns`` tests run only with
KEFU_NETNS=1, inside ``unshare -n``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# loadtest/ is not an installed package; `python -m pytest` from the root finds it through
# the working directory, a bare `pytest` needs this.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loadtest.pcap import DtmfEvent, make_rtp_pcap, speech_like_pcm  # noqa: E402


@pytest.fixture(scope="session")
def speech() -> np.ndarray:
    """One second of the deterministic speech-like test signal."""
    return speech_like_pcm(1.0)


@pytest.fixture(scope="session")
def speech_pcap(tmp_path_factory: pytest.TempPathFactory, speech: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("pcap") / "speech.pcap"
    make_rtp_pcap(path, speech)
    return path


@pytest.fixture(scope="session")
def dtmf0_pcap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1.5 s of speech with an RFC 4733 "0" at 0.5 s: what a caller pressing 0 sends."""
    path = tmp_path_factory.mktemp("pcap") / "speech_dtmf0.pcap"
    make_rtp_pcap(path, speech_like_pcm(1.5), dtmf=[DtmfEvent("0", at=0.5)])
    return path

"""Session-scoped models for the listen tests (each loads once: piper, Whisper, Silero)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def voice():
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


@pytest.fixture(scope="session")
def speech(voice) -> np.ndarray:
    """~2.5 s of piper speech at 16 kHz."""
    from kefu.ai_bridge.listen.heldout import speak

    return speak(voice, "I want to check the status of my order.", noise_scale=0, noise_w_scale=0)


@pytest.fixture(scope="session")
def whisper():
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

    engine = WhisperAsr()
    assert engine.ready, engine.error
    yield engine
    engine.close()

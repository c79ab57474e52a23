"""Fixtures for signaling tests (the fakes live in fakes.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from signaling.fakes import SECRET, Clock, FakeSfu

from kefu.signaling.hub import SignalingHub
from kefu.signaling.settings import SignalingSettings


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sfu() -> FakeSfu:
    return FakeSfu()


@pytest.fixture
def settings() -> SignalingSettings:
    return SignalingSettings(
        jwt_secret=SECRET,
        turn_secret="turn-secret",
        turn_urls=("turn:127.0.0.1:3478",),
        stun_urls=("stun:127.0.0.1:3478",),
    )


@pytest.fixture
def make_hub(sfu: FakeSfu, clock: Clock) -> Callable[..., SignalingHub]:
    def make(settings: SignalingSettings) -> SignalingHub:
        return SignalingHub(sfu, settings, clock=clock, wall_clock=lambda: 1_700_000_000.0)

    return make

"""Fixtures of the avatar tests (pure functions: no models, no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from kefu.ai_bridge.speak.base import PhonemeMark

MarksBuilder = Callable[[Sequence[tuple[str, float]]], tuple[PhonemeMark, ...]]


def contiguous_marks(phones: Sequence[tuple[str, float]]) -> tuple[PhonemeMark, ...]:
    """(phoneme, duration ms) pairs laid end to end from 0 ms, as the TTS engines give them."""
    marks: list[PhonemeMark] = []
    at = 0.0
    for phoneme, duration in phones:
        marks.append(PhonemeMark(phoneme, at, duration))
        at += duration
    return tuple(marks)


@pytest.fixture
def marks() -> MarksBuilder:
    return contiguous_marks

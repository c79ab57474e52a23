"""``loadtest.voice.mix_by_arrival``: what a WebRTC caller heard when a room sends it two
tracks (the AI's and, after a takeover, an agent's) is the tracks mixed on one timeline."""

from __future__ import annotations

import numpy as np

from loadtest.voice import mix_by_arrival

RATE = 16000
FRAME = 320  # 20 ms


def frame(value: int) -> np.ndarray:
    return np.full(FRAME, value, np.int16)


def test_two_tracks_are_summed_where_they_arrived_not_interleaved() -> None:
    bot = [(1.0 + 0.02 * k, frame(100), RATE, 0) for k in range(1, 51)]  # 1.0-2.0 s
    agent = [(1.5 + 0.02 * k, frame(1000), RATE, 1) for k in range(1, 26)]  # 1.5-2.0 s
    t0, pcm = mix_by_arrival(sorted(bot + agent, key=lambda f: f[0]))
    assert abs(t0 - 1.0) < 1e-9
    assert len(pcm) == RATE  # one second, not the 1.5 s that appending both would give
    assert set(pcm[: RATE // 2 - 1].tolist()) == {100}
    assert set(pcm[RATE // 2 + 1 :].tolist()) == {1100}


def test_a_gap_is_silence_and_a_late_burst_is_laid_end_to_end() -> None:
    early = [(0.02 * k, frame(7), RATE, 0) for k in range(1, 6)]  # 0-0.1 s
    # Nothing for 0.4 s, then three frames delivered at once at 0.56 s.
    burst = [(0.56, frame(9), RATE, 0)] * 3
    t0, pcm = mix_by_arrival(early + burst)
    assert t0 == 0.0
    assert set(pcm[: FRAME * 5].tolist()) == {7}
    start = int(0.54 * RATE)  # the first of the burst ends at its arrival
    assert set(pcm[FRAME * 5 : start].tolist()) == {0}
    assert set(pcm[start:].tolist()) == {9} and len(pcm) == start + 3 * FRAME


def test_loud_overlaps_clip_instead_of_wrapping_and_nothing_heard_is_empty() -> None:
    both = [(0.02, frame(30000), RATE, 0), (0.02, frame(30000), RATE, 1)]
    _, pcm = mix_by_arrival(both)
    assert set(pcm.tolist()) == {32767}
    assert mix_by_arrival([])[1].size == 0

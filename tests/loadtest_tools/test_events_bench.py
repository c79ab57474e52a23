"""The events benchmark counts what it measures: every published event reaches every reader,
or the reader is told it was dropped."""

from __future__ import annotations

import pytest

from loadtest import events_bench

pytestmark = pytest.mark.netns


async def test_every_event_is_delivered_or_reported_dropped() -> None:
    summary = await events_bench.run([1, 3], rate=200.0, seconds=0.5, burst=300, queue=64)
    assert [run["paced"]["readers"] for run in summary["runs"]] == [1, 3]
    for run in summary["runs"]:
        for phase in ("paced", "burst"):
            result = run[phase]
            expected = result["published"] * result["readers"]
            assert result["delivered"] + result["dropped"] == expected, result
            assert result["delay_ms_p50"] is not None and result["delay_ms_p50"] >= 0
    header, rows = events_bench.table(summary)
    assert header.startswith("| readers") and len(rows.splitlines()) == 2

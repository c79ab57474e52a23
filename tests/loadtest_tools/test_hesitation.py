"""The hesitation set is well-formed, and the tool scores a real run (piper -> Listener)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from loadtest.hesitation import (
    KINDS,
    PAUSED_KINDS,
    SET_PATHS,
    SPLITS,
    Item,
    check_items,
    load_items,
    run_items,
    spread,
    stimulus,
    summarize,
    words,
)


def test_the_set_is_well_formed() -> None:
    items = load_items()
    assert check_items(items) == []
    kinds = Counter(it.kind for it in items)
    assert set(kinds) == set(KINDS)
    assert 70 <= len(items) <= 100
    paused = sum(kinds[k] for k in PAUSED_KINDS)
    assert paused >= 45 and len(items) - paused >= 25
    assert len({it.id for it in items}) == len(items)
    for it in items:
        assert it.split in SPLITS
        assert len(it.pauses_ms) == len(it.segments) - 1
        if it.kind == "hesitant":
            assert all(600 <= p <= 1500 for p in it.pauses_ms), it.id
    heldout = [it for it in items if it.split == "heldout"]
    assert 0.25 <= len(heldout) / len(items) <= 0.4
    assert {it.kind for it in heldout} == set(KINDS)  # every kind is held out too
    assert len(load_items(split="dev")) == len(items) - len(heldout)
    assert [it.kind for it in spread(items, 5)] == list(KINDS)  # --limit: the kinds in turn


def test_the_mandarin_set_is_well_formed() -> None:
    items = load_items(SET_PATHS["zh"])
    assert check_items(items) == []
    assert {it.kind for it in items} == set(KINDS)
    heldout = [it for it in items if it.split == "heldout"]
    assert {it.kind for it in heldout} == set(KINDS)
    assert all(any("\u4e00" <= c <= "\u9fff" for c in "".join(it.segments)) for it in items)
    # Mandarin is scored by characters, digits said one by one as digits written
    assert words("订单号幺三八，六七。", "zh") == [*"订单号", *"13867"]
    assert words("订单号 138 67", "zh") == [*"订单号", *"13867"]


def test_check_items_names_what_is_wrong() -> None:
    (good,) = [it for it in load_items() if it.id == "hes-01"]
    bad = Item("hes-01", good.segments, (300, 900), "hesitant", "test")
    problems = check_items([good, bad])
    assert any("duplicate" in p for p in problems)
    assert any("split" in p for p in problems)
    assert any("2 pauses for 2 segments" in p for p in problems)
    assert any("pause outside" in p for p in problems)


@pytest.fixture(scope="module")
def whisper() -> Iterator[Any]:
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr

    engine = WhisperAsr()
    assert engine.ready, engine.error
    yield engine
    engine.close()


@pytest.mark.timeout(180)
async def test_a_real_run_scores_a_complete_and_a_hesitant_caller(whisper: Any) -> None:
    by_id = {it.id: it for it in load_items()}
    complete, hesitant = by_id["comp-01"], by_id["hes-21"]
    assert hesitant.kind == "hesitant" and hesitant.pauses_ms == (1200,)
    assert hesitant.after == ("filler",) and hesitant.segments[0].rstrip(",").endswith("uh")
    speech_end_ms = stimulus(complete).spans[-1][1] * 1000

    comp, hes = await run_items([complete, hesitant], asr=whisper)

    # The complete statement ends once, after its speech, and is heard.
    assert comp.turns == 1 and comp.cut_off is None
    assert comp.ends[0].at_ms > speech_end_ms
    assert comp.eot_delay_ms is not None and 0 < comp.eot_delay_ms < 1500
    assert {"cancel", "subscription"} <= set(words(comp.transcript))

    # The hesitant caller: cut off or not is the measurement; either way it is scored.
    assert isinstance(hes.cut_off, bool)
    heard = set(words(hes.transcript))
    if hes.cut_off:
        assert hes.turns >= 2 and hes.cut_gaps == (0,)
    else:
        assert hes.cut_gaps == () and hes.turns == 1
        assert "basically" in heard  # the words before the pause...
    assert len(heard & {"heater", "stopped", "working", "week"}) >= 2  # ...and after it
    assert hes.eot_delay_ms is not None and hes.eot_delay_ms > 0
    assert hes.decodes  # every Whisper decode is kept

    summary = summarize([comp, hes], [complete, hesitant])
    assert summary["cut_off"]["hesitant"]["n"] == 1
    assert summary["cut_off"]["hesitant"]["cut"] == int(hes.cut_off)
    assert summary["eot_delay_ms"]["complete"]["n"] == 1
    assert summary["turns_per_item"][str(comp.turns)] >= 1

"""loadtest understanding-cv: folds and labels (the run itself needs the e5 model and two
minutes; it is a benchmark, not a test)."""

from __future__ import annotations

from collections import Counter

from kefu.ai_bridge.dialog.callers import OUT_OF_SCOPE, CallerTurn
from loadtest.understanding import outcome
from loadtest.understanding_cv import _item, fold_of


def test_folds_are_stable_and_balanced() -> None:
    texts = [f"caller turn {i}" for i in range(1000)]
    folds = Counter(fold_of(t, 5) for t in texts)
    assert set(folds) == set(range(5)) and min(folds.values()) > 150
    assert [fold_of(t, 5) for t in texts] == [fold_of(t, 5) for t in texts]


def test_labels_become_eval_items() -> None:
    oos = _item(CallerTurn("what's the weather", OUT_OF_SCOPE, "en", "x"))
    assert oos["expect"] == "none" and outcome(oos, "en-store-nearest") == "wrong"
    human = _item(CallerTurn("get me a person", "en-human-request", "en", "x"))
    assert outcome(human, "human_agent", handoff=True) == "correct"
    robot = _item(CallerTurn("are you a bot", "en-human-robot", "en", "x"))
    assert outcome(robot, "human_agent", handoff=True) == "handoff"

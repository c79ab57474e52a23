"""Text sentiment: the labelled set, its dev/heldout split, accuracy floors and lexical cues.

Run as a script for the accuracy and cost report (tuning looked only at the dev half)::

    .venv/bin/python tests/ai_bridge/emotion/test_emotion_sentiment.py [dev|heldout]
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.emotion import EMOTIONS, EmotionEstimator
from kefu.ai_bridge.emotion.lexicon import find_cues
from kefu.ai_bridge.emotion.text import default_prototypes_path

DATA = Path(__file__).parent / "data"
DEAD_ZONE = 0.2
"""|valence| below this counts as 0 (neutral) when the sign is compared."""


@dataclass(frozen=True)
class Item:
    text: str
    lang: str
    label: str
    valence: int
    tags: tuple[str, ...]


def split_of(text: str) -> str:
    """Deterministic split by hash of the text: ~40 % heldout, the rest dev."""
    return "heldout" if hashlib.sha256(text.encode("utf-8")).digest()[0] % 5 < 2 else "dev"


def load_items(lang: str | None = None) -> list[Item]:
    items = []
    for code in ("en", "zh") if lang is None else (lang,):
        for line in (DATA / f"sentiment_{code}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            items.append(
                Item(row["text"], row["lang"], row["label"], row["valence"], tuple(row["tags"]))
            )
    return items


def sign(v: float) -> int:
    return 0 if abs(v) < DEAD_ZONE else (1 if v > 0 else -1)


@dataclass(frozen=True)
class Score:
    n: int
    label: float
    valence_sign: float
    ms_per_turn: float


def evaluate(est: EmotionEstimator, items: list[Item], verbose: bool = False) -> Score:
    hits = vhits = 0
    t0 = time.perf_counter()
    for it in items:
        emo = est.estimate(it.text, it.lang, None)
        ok, vok = emo.label == it.label, sign(emo.valence) == it.valence
        hits += ok
        vhits += vok
        if verbose and not (ok and vok):
            print(f"  {it.label:>9} -> {emo.label:<9} v={emo.valence:+.2f} {emo.cues} {it.text}")
    ms = (time.perf_counter() - t0) * 1000 / max(len(items), 1)
    return Score(len(items), hits / len(items), vhits / len(items), ms)


# --- the labelled set ---------------------------------------------------------------------


def test_labelled_set_is_large_enough_and_well_formed() -> None:
    en, zh = load_items("en"), load_items("zh")
    assert len(en) >= 80 and len(zh) >= 50
    for it in en + zh:
        assert it.label in EMOTIONS, it
        assert it.valence in (-1, 0, 1), it
        assert it.lang in ("en", "zh"), it
    texts = [it.text for it in en + zh]
    assert len(set(texts)) == len(texts)
    tags = Counter(t for it in en + zh for t in it.tags)
    for tag in ("sarcasm", "profanity", "whisper", "negation", "mixed"):
        assert tags[tag] >= 2, tag
    assert Counter(it.label for it in en + zh).keys() == set(EMOTIONS)


def _norm(text: str) -> str:
    return re.sub(r"[\W_]+", "", text.lower())


def test_labelled_set_does_not_repeat_the_prototypes() -> None:
    doc = json.loads(default_prototypes_path().read_text(encoding="utf-8"))
    protos = {
        _norm(s) for by_lang in doc["classes"].values() for xs in by_lang.values() for s in xs
    }
    for it in load_items():
        assert _norm(it.text) not in protos, it.text


def test_split_is_deterministic_and_both_halves_cover_both_languages() -> None:
    items = load_items()
    held = [it for it in items if split_of(it.text) == "heldout"]
    assert 0.3 < len(held) / len(items) < 0.6
    assert {it.lang for it in held} == {"en", "zh"}
    assert [split_of(it.text) for it in items] == [split_of(it.text) for it in items]


# --- accuracy (floors a little under what was measured: see the module doc to re-measure) --


@pytest.mark.parametrize(
    ("lang", "label_floor", "valence_floor"),
    [(None, 0.75, 0.75), ("en", 0.72, 0.72), ("zh", 0.70, 0.70)],
)
def test_heldout_accuracy(
    estimator: EmotionEstimator, lang: str | None, label_floor: float, valence_floor: float
) -> None:
    held = [it for it in load_items(lang) if split_of(it.text) == "heldout"]
    score = evaluate(estimator, held)
    assert score.label >= label_floor, score
    assert score.valence_sign >= valence_floor, score


# --- lexical cues -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "great, just great, the order vanished again",
        "oh perfect, another hour on hold",
        "thanks for nothing",
        "真是太好了呢，又没到",
        "呵呵，你们效率可真行",
    ],
)
def test_sarcasm_markers(text: str) -> None:
    assert find_cues(text).sarcasm


@pytest.mark.parametrize(
    "text",
    [
        "great, thank you, it works now",
        "perfect, that's all I needed",
        "太好了，问题解决了",
        "thank you, I was worried it was lost but you found it",
    ],
)
def test_genuine_praise_is_not_sarcasm(text: str) -> None:
    assert not find_cues(text).sarcasm


@pytest.mark.parametrize(
    ("text", "swears"),
    [
        ("this is damn ridiculous", 1),
        ("what the fuck", 1),
        ("他妈的又扣钱", 1),
        ("卧槽，什么破服务", 2),
        # Innocent look-alikes.
        ("hello, I need help with the shell script", 0),
        ("请问怎么操作", 0),
        ("这个产品很可靠，", 0),
        ("我老是收到垃圾短信", 0),
        ("我帮你妈妈查一下", 0),
        ("页面滚动不了", 0),
    ],
)
def test_profanity(text: str, swears: int) -> None:
    assert find_cues(text).profanity == swears


def test_negation_cues() -> None:
    assert find_cues("I'm not happy with this at all").negated_positive
    assert find_cues("我对这个处理一点都不满意").negated_positive
    assert find_cues("no problem, take your time").negated_negative
    assert find_cues("没关系，我等一下").negated_negative
    assert not find_cues("I'm not sure which plan I have").negated_positive
    assert find_cues("I am EXTREMELY ANGRY!!").intensity >= 3
    assert find_cues("my PIN does not work").intensity == 0  # one acronym is not shouting


def test_sarcasm_after_a_complaint_needs_the_previous_turn(estimator: EmotionEstimator) -> None:
    plain = estimator.estimate("Oh, wonderful.", "en", None)
    after = estimator.estimate("Wonderful.", "en", None, previous_valence=-0.7)
    assert after.label == "angry" and after.valence < -0.3 and "sarcasm" in after.cues
    assert plain.valence > after.valence
    resolved = estimator.estimate("Wonderful, it works now.", "en", None, previous_valence=-0.7)
    assert resolved.label != "angry" and resolved.valence > 0


def test_profanity_and_negation_move_the_estimate(estimator: EmotionEstimator) -> None:
    base = estimator.estimate("the router stopped working", "en", None)
    swear = estimator.estimate("the damn router stopped working, this is shit", "en", None)
    assert swear.label == "angry" and swear.valence < base.valence
    assert estimator.estimate("I'm not satisfied with the repair", "en", None).valence < -0.2
    assert estimator.estimate("不用了，没问题", "zh", None).valence > -0.2


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "heldout"
    est = EmotionEstimator()
    t0 = time.perf_counter()
    assert est.load(), est.error
    print(f"load: {time.perf_counter() - t0:.2f} s")
    for lang in ("en", "zh", None):
        items = [it for it in load_items(lang) if split_of(it.text) == which]
        s = evaluate(est, items, verbose=lang is None)
        print(
            f"{which} {lang or 'all'}: n={s.n} label={s.label:.3f} "
            f"valence_sign={s.valence_sign:.3f} text-only {s.ms_per_turn:.1f} ms/turn"
        )
    # Cost of a whole turn (words + prosody) on speech-like audio of typical lengths.
    items = [it for it in load_items() if split_of(it.text) == which]
    rng = np.random.default_rng(0)
    for seconds in (2.0, 4.0, 8.0):
        n = int(16000 * seconds)
        phase = 2 * np.pi * np.cumsum(np.linspace(120.0, 180.0, n)) / 16000
        tone = sum(np.sin(k * phase) / k for k in range(1, 9))
        pcm = (tone * 3000 + rng.standard_normal(n) * 100).astype(np.int16)
        t0 = time.perf_counter()
        for it in items:
            est.estimate(it.text, it.lang, pcm)
        ms = (time.perf_counter() - t0) * 1000 / len(items)
        print(f"words + prosody, {seconds:.0f} s of audio: {ms:.1f} ms/turn")


if __name__ == "__main__":
    main()

"""ARKit names and the phoneme → viseme tables (English IPA, espeak Mandarin, pinyin)."""

from __future__ import annotations

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import (
    BLENDSHAPES,
    COUNT,
    INDEX,
    SPEECH_OWNED,
    as_pose,
    index_of,
    indices,
    pose_vector,
)
from kefu.ai_bridge.avatar.poses import SHAPES
from kefu.ai_bridge.avatar.visemes import Notation, Viseme, clean_phoneme, phoneme_visemes
from kefu.ai_bridge.speak.piper_engine import alignment_marks

V = Viseme
PINYIN = Notation.PINYIN


def seq(phonemes: list[str], notation: Notation = Notation.IPA) -> list[str]:
    return [v.value for p in phonemes for v in phoneme_visemes(p, notation)]


# --- ARKit ----------------------------------------------------------------------------------


def test_the_52_arkit_names_in_apples_order() -> None:
    assert COUNT == 52 and len(set(BLENDSHAPES)) == 52
    assert BLENDSHAPES[:7] == (
        "eyeBlinkLeft",
        "eyeLookDownLeft",
        "eyeLookInLeft",
        "eyeLookOutLeft",
        "eyeLookUpLeft",
        "eyeSquintLeft",
        "eyeWideLeft",
    )
    expected = {
        "eyeBlinkRight": 7,
        "eyeWideRight": 13,
        "jawForward": 14,
        "jawOpen": 17,
        "mouthClose": 18,
        "mouthFunnel": 19,
        "mouthPucker": 20,
        "mouthSmileLeft": 23,
        "mouthPressLeft": 35,
        "mouthUpperUpRight": 40,
        "browDownLeft": 41,
        "browInnerUp": 43,
        "cheekPuff": 46,
        "noseSneerLeft": 49,
        "tongueOut": 51,
    }
    assert {name: INDEX[name] for name in expected} == expected
    assert indices(["jawOpen", "tongueOut"]) == (17, 51)


def test_unknown_names_and_out_of_range_poses_are_refused() -> None:
    with pytest.raises(KeyError, match="mouthOpen"):
        index_of("mouthOpen")
    with pytest.raises(KeyError):
        as_pose({"jawOpn": 0.3})
    with pytest.raises(ValueError, match="outside"):
        as_pose({"jawOpen": 1.2})
    vector = pose_vector({"jawOpen": 0.5, "tongueOut": 0.25})
    assert vector.dtype == np.float32 and vector.shape == (52,)
    assert np.flatnonzero(vector).tolist() == [17, 51]


def test_speech_owns_the_lips_and_shares_the_corners() -> None:
    owned = {BLENDSHAPES[i] for i in SPEECH_OWNED}
    assert {"jawOpen", "mouthClose", "mouthFunnel", "mouthPucker", "tongueOut"} <= owned
    assert {"mouthPressLeft", "mouthLowerDownRight", "mouthUpperUpLeft"} <= owned
    assert not owned & {"mouthSmileLeft", "mouthFrownRight", "mouthStretchLeft", "browInnerUp"}
    assert not owned & {name for name in BLENDSHAPES if name.startswith("eye")}


# --- viseme poses -----------------------------------------------------------------------------


def test_every_viseme_has_a_pose_inside_the_unit_range() -> None:
    assert len(Viseme) == 16 and set(SHAPES) == set(Viseme)
    for viseme, shape in SHAPES.items():
        vector = pose_vector(shape.pose)
        assert vector.min() >= 0.0 and vector.max() <= 1.0, viseme
        assert shape.dominance > 0 and shape.rounding_dominance > 0
    assert not SHAPES[V.SIL].pose


def test_poses_say_what_the_viseme_looks_like() -> None:
    def w(viseme: Viseme, name: str) -> float:
        return SHAPES[viseme].pose.get(name, 0.0)

    jaws = {v: w(v, "jawOpen") for v in Viseme}
    assert max(jaws, key=jaws.__getitem__) is V.AA
    assert w(V.AA, "jawOpen") > w(V.E, "jawOpen") > w(V.I, "jawOpen")
    assert w(V.PP, "jawOpen") <= 0.05 and w(V.PP, "mouthPressLeft") >= 0.5
    assert w(V.PP, "mouthClose") >= w(V.PP, "jawOpen")
    assert w(V.FF, "mouthRollLower") >= 0.4
    assert w(V.TH, "tongueOut") >= 0.3
    assert w(V.U, "mouthPucker") >= 0.7 and w(V.O, "mouthFunnel") >= 0.5
    assert w(V.I, "mouthStretchLeft") >= 0.4 and w(V.I, "mouthPucker") == 0
    assert {v for v in Viseme if SHAPES[v].rounded} == {V.CH, V.RR, V.O, V.U}


# --- English IPA ------------------------------------------------------------------------------


def test_hello_how_are_you_from_piper_alignments() -> None:
    # piper's phonemes for "Hello, how are you?", one code point each, as the voice sends them
    phones = "^ h ə l ˈ o ʊ , _ h ˈ a ʊ _ ɑ ː ɹ _ j u ː ? $".split()
    pairs = [(" " if p == "_" else p, 2205) for p in phones]
    marks = alignment_marks(pairs, 22050)
    names = [m.phoneme for m in marks]
    assert names[:7] == ["sil", "h", "ə", "l", "ˈo", "ʊ", "sil"]
    assert seq(names) == [
        *["sil", "kk", "@", "nn", "O", "U", "sil"],  # hello,
        *["kk", "aa", "U", "sil"],  # how
        *["aa", "RR", "sil"],  # are
        *["I", "U", "sil"],  # you?
    ]


def test_espeak_english_ipa_joins_diphthongs_and_affricates() -> None:
    assert seq(["h", "ə", "l", "ˈoʊ"]) == ["kk", "@", "nn", "O", "U"]
    assert seq(["tʃ", "ˈɜː", "tʃ"]) == ["CH", "E", "CH"]
    assert seq(["dʒ", "ˈʌ", "dʒ"]) == ["CH", "aa", "CH"]
    assert seq(["ɑːɹ"]) == ["aa", "RR"]
    assert seq(["θ", "ð", "f", "v", "p", "b", "m", "ŋ", "ɡ"]) == [
        *["TH", "TH", "FF", "FF", "PP", "PP", "PP", "kk", "kk"],
    ]
    assert seq(["s", "z", "ʃ", "ʒ", "n", "l", "ɹ", "ɚ", "ɾ", "w"]) == [
        *["SS", "SS", "CH", "CH", "nn", "nn", "RR", "RR", "DD", "U"],
    ]


# --- Mandarin ---------------------------------------------------------------------------------


def test_espeak_mandarin_symbols() -> None:
    # What espeak-ng 1.52 cmn sends for 你好, 谢谢, 中国, 吃饭, 是, 去学校
    assert seq(["n", "i", "χ", "ˈɑu"]) == ["nn", "I", "kk", "aa", "U"]
    assert seq(["ɕ", "iɛ", "ɕ", "iɛ"]) == ["SS", "I", "E", "SS", "I", "E"]
    assert seq(["ts.", "ˈonɡ", "k", "ˈuo"]) == ["CH", "O", "kk", "kk", "U", "O"]
    assert seq(["ts.h", "ˈi.", "f", "ˈa", "n"]) == ["CH", "@", "FF", "aa", "nn"]
    assert seq(["s.", "ˈi.", "ʐ"]) == ["CH", "@", "RR"]
    assert seq(["tɕh", "ˈy", "ɕ", "ˈyɛ", "ɕ", "j", "ˈɑu"]) == [
        *["SS", "U", "SS", "U", "E", "SS", "I", "aa", "U"],
    ]
    assert seq(["ts", "ˈi̪", "ph", "th", "kh"]) == ["SS", "I", "PP", "DD", "kk"]


def test_pinyin_initials_and_finals_of_ni_hao_and_xie_xie() -> None:
    assert seq(["n", "i3", "h", "ao3"], PINYIN) == ["nn", "I", "kk", "aa", "U"]
    assert seq(["ni3", "hao3"], PINYIN) == ["nn", "I", "kk", "aa", "U"]
    assert seq(["x", "ie4", "x", "ie5"], PINYIN) == ["SS", "I", "E", "SS", "I", "E"]
    assert seq(["xie4", "xie"], PINYIN) == ["SS", "I", "E", "SS", "I", "E"]
    assert seq(["nǐ", "hǎo", "xiè"], PINYIN) == ["nn", "I", "kk", "aa", "U", "SS", "I", "E"]


@pytest.mark.parametrize(
    ("initial", "viseme"),
    [
        *[(i, "PP") for i in ("b", "p", "m")],
        ("f", "FF"),
        *[(i, "DD") for i in ("d", "t")],
        *[(i, "nn") for i in ("n", "l")],
        *[(i, "kk") for i in ("g", "k", "h")],
        *[(i, "SS") for i in ("j", "q", "x", "z", "c", "s")],
        *[(i, "CH") for i in ("zh", "ch", "sh")],
        ("r", "RR"),
    ],
)
def test_every_pinyin_initial(initial: str, viseme: str) -> None:
    assert seq([initial], PINYIN) == [viseme]


@pytest.mark.parametrize(
    ("final", "visemes"),
    [
        ("a", "aa"),
        ("o", "O"),
        ("e", "E"),
        ("i", "I"),
        ("u", "U"),
        ("ü", "U"),
        ("v", "U"),
        ("u:", "U"),
        ("ai", "aa I"),
        ("ei", "E I"),
        ("ao", "aa U"),
        ("ou", "O U"),
        ("an", "aa nn"),
        ("en", "@ nn"),
        ("ang", "aa kk"),
        ("eng", "@ kk"),
        ("ong", "U kk"),
        ("er", "@ RR"),
        ("iao", "I aa U"),
        ("iu", "I O U"),
        ("ian", "I E nn"),
        ("iong", "I U kk"),
        ("uai", "U aa I"),
        ("ui", "U E I"),
        ("un", "U @ nn"),
        ("üe", "U E"),
        ("üan", "U E nn"),
    ],
)
def test_pinyin_finals_break_into_their_vowels(final: str, visemes: str) -> None:
    assert seq([final + "2"], PINYIN) == visemes.split()


def test_pinyin_syllables_with_y_w_and_hidden_umlauts() -> None:
    assert seq(["zhang1"], PINYIN) == ["CH", "aa", "kk"]
    assert seq(["xue2", "ju4", "quan2"], PINYIN) == [
        *["SS", "U", "E", "SS", "U", "SS", "U", "E", "nn"],
    ]
    assert seq(["lü4", "lv4", "nu:3"], PINYIN) == ["nn", "U", "nn", "U", "nn", "U"]
    assert seq(["yi1", "you3", "yuan2", "wu3", "wo3"], PINYIN) == [
        *["I", "I", "O", "U", "U", "E", "nn", "U", "U", "O"],
    ]
    assert seq(["shui3", "liu2", "dun4", "huar1"], PINYIN) == [
        *["CH", "U", "E", "I", "nn", "I", "O", "U", "DD", "U", "@", "nn"],
        *["kk", "U", "aa", "RR"],
    ]


# --- tolerance --------------------------------------------------------------------------------


def test_stress_length_tone_and_diacritics_are_ignored() -> None:
    assert clean_phoneme("ˈaː") == "a"
    assert clean_phoneme("ˌɔːɹ") == "ɔɹ"
    assert clean_phoneme("tʰ") == "t"
    assert clean_phoneme("a˥˩") == "a"
    assert clean_phoneme("Hao3", PINYIN) == "hao"
    assert clean_phoneme("lǚ", PINYIN) == "lv"
    assert clean_phoneme("nu:3", PINYIN) == "nv"
    assert clean_phoneme("ü") == "u"  # IPA has no ü; its u is still rounded
    assert seq(["ˈaː", "ˌiː", "a˥˩", "tʰ", "ɑ̃", "ɚ˞", "i̪"]) == [
        *["aa", "I", "aa", "DD", "aa", "RR", "I"],
    ]


@pytest.mark.parametrize("silence", ["sil", "SIL", "", " ", "_", "^", "$", ",", "?", "。", "pau"])
def test_silences_and_punctuation(silence: str) -> None:
    assert phoneme_visemes(silence) == (V.SIL,)
    assert phoneme_visemes(silence, PINYIN) == (V.SIL,)


def test_prosody_alone_has_no_viseme() -> None:
    for mark in ("ˈ", "ˌ", "ː", "3", "˥˩", "↓"):
        assert phoneme_visemes(mark) == ()
        assert phoneme_visemes(mark, PINYIN) == ()


def test_unknown_phonemes_map_to_the_neutral_open_viseme() -> None:
    for unknown in ("Ж", "ʭ", "\u0e01", "中"):
        assert phoneme_visemes(unknown) == (V.NEUTRAL,)
    assert phoneme_visemes("Жa") == (V.AA,)  # the known part wins
    assert phoneme_visemes("Ж", PINYIN) == (V.NEUTRAL,)
    assert SHAPES[V.NEUTRAL].pose["jawOpen"] >= 0.2  # open, not closed


def test_random_strings_never_raise() -> None:
    rng = np.random.default_rng(5)
    pools = [
        (0x20, 0x7F),
        (0x250, 0x2AF),  # IPA
        (0x2B0, 0x2FF),  # modifier letters
        (0x300, 0x36F),  # combining marks
        (0x4E00, 0x4E80),  # Hanzi
        (0xD800 - 64, 0xD800),
    ]
    for _ in range(2000):
        lo, hi = pools[rng.integers(len(pools))]
        text = "".join(chr(int(c)) for c in rng.integers(lo, hi, size=rng.integers(0, 6)))
        for notation in Notation:
            out = phoneme_visemes(text, notation)
            assert isinstance(out, tuple) and all(isinstance(v, Viseme) for v in out)

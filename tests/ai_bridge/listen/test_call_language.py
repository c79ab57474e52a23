"""Choosing a call's language (trunk, number, room, header, default) and following an
``auto`` caller, without models."""

from __future__ import annotations

import pytest

from kefu.ai_bridge.call_language import CallLanguage
from kefu.ai_bridge.listen.asr.language import asr_hint, call_language, check_language_map
from kefu.errors import ConfigError
from kefu.mediaserver.config import load_config

NUMBERS = {"400": "zh", "4008": "en", "+1800": "en"}
TRUNKS = {"10.1.0.0/16": "zh", "10.1.2.0/24": "auto", "2001:db8::/32": "en"}
ROOMS = {"cn-": "zh", "cn-hk-": "auto"}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "auto"),
        ({"called": "4001234"}, "zh"),
        ({"called": "4008123"}, "en"),  # the longest prefix wins
        ({"called": "+18005550100"}, "auto"),  # "+" is ignored on the number, not the key
        ({"called": "18005550100"}, "auto"),
        ({"source_host": "10.1.9.9"}, "zh"),
        ({"source_host": "10.1.2.3"}, "auto"),  # the narrowest network wins
        ({"source_host": "[2001:db8::5]"}, "en"),
        ({"source_host": "not-an-ip"}, "auto"),
        ({"room": "cn-shop"}, "zh"),
        ({"room": "cn-hk-1"}, "auto"),
        ({"header": "zh-CN", "called": "4008123"}, "zh"),  # the VCC's header first
        ({"header": "klingon", "called": "4001"}, "zh"),  # a bad header is ignored
        ({"called": "4001", "source_host": "2001:db8::1"}, "zh"),  # number before trunk
    ],
)
def test_call_language_picks_the_most_specific_rule(kwargs, expected) -> None:
    got = call_language("auto", by_number=NUMBERS, by_trunk=TRUNKS, by_room=ROOMS, **kwargs)
    assert got == expected


def test_default_language_is_used_when_nothing_matches() -> None:
    assert call_language("en", called="999") == "en"
    assert call_language("zh") == "zh"
    assert call_language("bogus") == "auto"


def test_language_maps_are_validated_in_config() -> None:
    assert check_language_map({"400": "zh"}, "k") == ""
    assert "expected en, zh or auto" in check_language_map({"400": "fr"}, "k")
    assert "not a network" in check_language_map({"x": "zh"}, "k", networks=True)
    with pytest.raises(ConfigError) as err:
        load_config(environ={}, overrides={"ai": {"language_by_trunk": {"10.0.0.0/8": "de"}}})
    assert err.value.key == "ai.language_by_trunk"
    config = load_config(environ={"KEFU_AI_LANGUAGE_BY_NUMBER": "400:zh,800:en"})
    assert dict(config.ai.language_by_number) == {"400": "zh", "800": "en"}
    assert load_config(environ={}).ai.language == "auto"


def test_an_auto_call_keeps_its_first_language_until_it_clearly_switches() -> None:
    state = CallLanguage.start("auto", "zh")
    assert (state.current, state.hint) == ("zh", "auto")  # greets in zh, listens freely
    assert not state.observe("en", "  ")  # an empty transcript decides nothing
    assert state.observe("en", "where is my order")  # the first words decide: English
    assert (state.current, state.hint, state.switches) == ("en", "auto:en", 0)
    assert not state.observe("en", "thanks")
    assert state.observe("zh", "我还是说中文吧")  # the recognizer was sure: a switch
    assert (state.current, state.hint, state.switches) == ("zh", "auto:zh", 1)


def test_a_fixed_language_never_changes() -> None:
    state = CallLanguage.start("zh")
    assert not state.observe("en", "hello there")
    assert (state.current, state.hint) == ("zh", "zh")
    assert asr_hint("en", "zh") == "en"

"""Static checks of loadtest/sipp: well-formed XML, usage notes on top, name resolution."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from loadtest.peers import SIPP_DIR, resolve_scenario, sipp_command

SCENARIOS = sorted(p.name for p in SIPP_DIR.glob("*.xml"))
CORE = {"uac_cancel.xml", "uac_echo.xml", "uac_options.xml", "uas_kefu_mimic.xml"}


def test_the_core_scenarios_exist() -> None:
    assert set(SCENARIOS) >= CORE


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_is_well_formed_and_documented(name: str) -> None:
    text = (SIPP_DIR / name).read_text(encoding="iso-8859-1")
    root = ET.fromstring(text.encode("iso-8859-1"))
    assert root.tag == "scenario"
    head = text[: text.index("<scenario")]
    assert f"-sf {name}" in head, "usage line missing"
    assert "Run (UDP" in head and "-t t1" in head, "transport notes missing"
    # every -set variable a scenario reads must be declared, or SIPp refuses to start
    declared = root.find("Global")
    for var in re.findall(r"-set ([a-z_]+)", head):
        assert declared is not None and var in declared.get("variables", "").split(",")


def test_resolve_and_command_line(tmp_path) -> None:  # noqa: ANN001
    assert resolve_scenario("uac_echo") == SIPP_DIR / "uac_echo.xml"
    assert resolve_scenario("uac_echo.xml") == SIPP_DIR / "uac_echo.xml"
    with pytest.raises(FileNotFoundError):
        resolve_scenario("no_such_scenario")
    cmd = sipp_command(
        "uac_echo", "127.0.0.1:5070", tmp_path, transport="t1", calls=3, rate=2.5,
        max_concurrent=2, local_port=5061, media_port=6000, keys={"pcap": "/a.pcap"},
        variables={"audio_ms": 1000}, timeout=9.6,
    )  # fmt: skip
    line = " ".join(cmd)
    assert cmd[:4] == ["sipp", "127.0.0.1:5070", "-sf", str(SIPP_DIR / "uac_echo.xml")]
    for part in ("-t t1", "-m 3", "-r 2.5", "-l 2", "-p 5061", "-mp 6000", "-key pcap /a.pcap",
                 "-set audio_ms 1000", "-timeout 10s -timeout_error", "-nostdin"):  # fmt: skip
        assert part in line
    # -set only works once -sf has loaded the scenario's globals
    assert cmd.index("-set") > cmd.index("-sf")

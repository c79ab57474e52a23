"""The ``kefu`` command line: configuration errors, tokens, knowledge-base import."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from kefu.mediaserver.cli import main


def test_bad_config_exits_2_naming_the_key(tmp_path: Path, capsys) -> None:
    path = tmp_path / "kefu.toml"
    path.write_text('[calls]\nmedia_mode = "video"\n')
    assert main(["serve", "--config", str(path)]) == 2
    assert "calls.media_mode" in capsys.readouterr().err


def test_token_is_signed_with_the_installation_secret(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KEFU_SERVER_STATE_DIR", str(tmp_path))
    assert main(["token", "--role", "agent", "--user", "ann"]) == 0
    token = capsys.readouterr().out.strip()
    secret = (tmp_path / "jwt-secret").read_text().strip()
    claims = jwt.decode(token, secret, algorithms=["HS256"])
    assert claims["sub"] == "ann" and claims["role"] == "agent"
    assert (tmp_path / "jwt-secret").stat().st_mode & 0o077 == 0


def test_kb_import_rejects_a_malformed_file_and_imports_nothing(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("KEFU_SERVER_STATE_DIR", str(tmp_path))
    bad = tmp_path / "faq.csv"
    bad.write_text('question,answer\n"never closed,oops\n')
    assert main(["kb", "import", str(bad)]) == 1
    assert "faq.csv:2" in capsys.readouterr().err
    assert not (tmp_path / "kb").exists()


@pytest.mark.parametrize("role", ["root", ""])
def test_token_rejects_unknown_roles(role: str) -> None:
    with pytest.raises(SystemExit):
        main(["token", "--role", role, "--user", "x"])

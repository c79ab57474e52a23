"""The pages' logic under node's own test runner: the workbench (kefu/web/workbench.js), the
caller page's call (kefu/web/call.js: resume, joining again when a node is lost, the data
channels and the avatar mode) and its avatar (kefu/web/avatar_mesh.js: the head mesh;
avatar_playout.js: the weights frame, the playout, the audio delay; avatar_view.js: what the
avatar box shows; avatar_canvas.js: the WebGL view against a stub; avatar_support.mjs is what
those suites share)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize(
    "suite",
    [
        "workbench.test.mjs",
        "call.test.mjs",
        "avatar_mesh.test.mjs",
        "avatar_playout.test.mjs",
        "avatar_view.test.mjs",
        "avatar_canvas.test.mjs",
    ],
)
def test_page_logic_passes_its_node_tests(suite: str) -> None:
    run = subprocess.run(
        ["node", "--test", str(HERE / suite)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout and "# pass 0" not in run.stdout, run.stdout[-2000:]

"""``python -m loadtest.avatar_bench``: the avatar-calls table of docs/BENCHMARKS.md, end to end.

Starts ``kefu serve`` (AI mode, one room worker, ``ai.avatar = "video"``, its state under
``--workdir``), then for each ``MODE:N`` of ``--runs`` runs ``python -m loadtest avatar-calls``
against it (``--seconds`` per call, callers 0.5 s apart, their files kept under the workdir
for ``avatar-sync --plot``), prints one JSON line per run and writes them all to
``<workdir>/avatar-calls.json``. Run it inside ``unshare -n`` (loopback only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from loadtest.kefu_process import start_kefu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.avatar_bench")
    parser.add_argument("--workdir", default="/tmp/avatar-bench")
    parser.add_argument("--runs", default="video:1,video:2,video:3,weights:4,weights:8")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "KEFU_CALLS_MEDIA_MODE": "ai",
        "KEFU_AI_AVATAR": "video",
        "KEFU_WEBRTC_ROOM_WORKERS": "1",
        "KEFU_SERVER_STATE_DIR": str(work / "state"),
        "KEFU_WEBRTC_ICE_HOST_ADDRESSES": "127.0.0.1",
    }
    kefu = start_kefu(work, env=env)
    results: dict[str, object] = {}
    try:
        for run in args.runs.split(","):
            mode, calls = run.split(":")
            out, keep = work / f"{mode}-{calls}.json", work / f"keep-{mode}-{calls}"
            cmd = [
                sys.executable, "-m", "loadtest", "avatar-calls", "--target", kefu.http,
                "--calls", calls, "--seconds", str(args.seconds), "--stagger", "0.5",
                "--mode", mode, "--json", str(out), "--keep", str(keep),
            ]  # fmt: skip
            subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, timeout=600)
            summary = json.loads(out.read_text())
            summary.pop("rows", None)
            results[run] = summary
            sys.stdout.write(json.dumps({"run": run, **summary}) + "\n")
            time.sleep(3)
    finally:
        kefu.stop()
    (work / "avatar-calls.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

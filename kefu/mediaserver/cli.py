"""The ``kefu`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kefu import __version__
from kefu.errors import ConfigError
from kefu.mediaserver.config import MEDIA_MODES, Config, load_config, parse_port_range


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kefu", description=__doc__)
    parser.add_argument("--version", action="version", version=f"kefu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the media server")
    serve.add_argument("--config", metavar="FILE", help="TOML configuration file")
    serve.add_argument("--sip-listen", metavar="HOST:PORT", help="SIP address (UDP and TCP)")
    serve.add_argument("--http-listen", metavar="HOST:PORT", help="HTTP address")
    serve.add_argument("--rtp-ports", metavar="LO-HI", help="RTP port range")
    serve.add_argument("--media-mode", choices=MEDIA_MODES, help="what a call hears")
    serve.add_argument("--max-calls", type=int, metavar="N", help="most concurrent calls")
    serve.add_argument("--transfer-target", metavar="URI", help="human queue for REFER")
    serve.add_argument("--ring-seconds", type=float, metavar="S", help="ring before answering")
    serve.add_argument("--max-call-seconds", type=float, metavar="S", help="hang up after S")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    serve.add_argument("--no-uvloop", action="store_true", help="use the stock asyncio loop")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            out.setdefault(section, {})[key] = value

    put("sip", "listen", args.sip_listen)
    put("http", "listen", args.http_listen)
    if args.rtp_ports is not None:
        put("rtp", "ports", parse_port_range(args.rtp_ports, "--rtp-ports"))
    put("calls", "media_mode", args.media_mode)
    put("calls", "max_concurrent", args.max_calls)
    put("sip", "transfer_target", args.transfer_target)
    put("calls", "ring_seconds", args.ring_seconds)
    put("calls", "max_call_seconds", args.max_call_seconds)
    put("log", "level", args.log_level)
    return out


def _serve(config: Config, *, uvloop_ok: bool) -> int:
    from kefu.mediaserver.server import run_server

    if uvloop_ok:
        try:
            import uvloop

            return uvloop.run(run_server(config))
        except ImportError:
            pass
    return asyncio.run(run_server(config))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        try:
            config = load_config(args.config, overrides=_overrides(args))
        except ConfigError as exc:
            print(f"kefu: configuration error: {exc}", file=sys.stderr)  # noqa: T201
            return 2
        return _serve(config, uvloop_ok=not args.no_uvloop)
    return 2


if __name__ == "__main__":
    sys.exit(main())

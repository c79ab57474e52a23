"""The ``kefu`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kefu import __version__
from kefu.errors import ConfigError, StateUnavailable
from kefu.mediaserver.config import (
    MEDIA_MODES,
    Config,
    jwt_secret,
    load_config,
    parse_port_range,
)
from kefu.mediaserver.recording import prepare_dir, recordings_path
from kefu.privacy.seal import load_key


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
    token = sub.add_parser("token", help="mint a development JWT for the signaling WebSocket")
    token.add_argument("--config", metavar="FILE")
    token.add_argument(
        "--role", required=True, choices=("customer", "agent", "supervisor", "admin")
    )
    token.add_argument("--user", required=True)
    token.add_argument("--room", help="restrict the token to this room")
    token.add_argument("--ttl", type=float, default=3600.0, metavar="SECONDS")
    decrypt = sub.add_parser(
        "decrypt", help="decrypt a sealed recording or interaction log (authorised export)"
    )
    decrypt.add_argument("path", metavar="FILE")
    decrypt.add_argument("--key-file", required=True, metavar="KEY")
    decrypt.add_argument("--out", metavar="FILE", help="default: FILE without .sm4, or FILE.txt")
    keygen = sub.add_parser("keygen", help="write a new SM4 key file (privacy.key_file)")
    keygen.add_argument("path", metavar="KEY")
    kb = sub.add_parser("kb", help="knowledge base")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    kb_import = kb_sub.add_parser("import", help="import Markdown, CSV or JSONL files")
    kb_import.add_argument("paths", nargs="+", metavar="PATH")
    kb_import.add_argument("--config", metavar="FILE")
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
    return asyncio.run(run_server(config, uvloop_ok=False))


def _token(args: argparse.Namespace) -> int:
    from kefu.signaling.tokens import mint_token

    config = load_config(args.config)
    print(mint_token(jwt_secret(config), args.user, args.role, args.ttl, args.room))  # noqa: T201
    return 0


def _privacy(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kefu.privacy.export import decrypt, keygen
    from kefu.privacy.seal import SealError

    path = Path(args.path)
    try:
        if args.command == "keygen":
            keygen(path)
            print(f"wrote a new key to {path} (mode 600)")  # noqa: T201
            return 0
        default = path.with_suffix("") if path.suffix == ".sm4" else Path(f"{path}.txt")
        print(decrypt(path, Path(args.key_file), Path(args.out) if args.out else default))  # noqa: T201
        return 0
    except (SealError, OSError) as exc:
        print(f"kefu: {args.command}: {exc}", file=sys.stderr)  # noqa: T201
        return 1


def _kb_import(args: argparse.Namespace) -> int:
    from kefu.ai_bridge.dialog.kb import KbImportError, import_kb

    config = load_config(args.config)
    target = config.state_path / "kb"
    try:
        report = import_kb(args.paths, target)
    except KbImportError as exc:
        print(f"kefu: knowledge base not imported: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    langs = ", ".join(f"{n} {lang}" for lang, n in sorted(report.by_lang.items()))
    print(  # noqa: T201
        f"imported {report.entries} entries ({langs}) from {len(report.files)} file(s) "
        f"into {report.target_dir} in {report.seconds:.1f} s"
    )
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)  # noqa: T201
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "token":
            return _token(args)
        if args.command == "kb":
            return _kb_import(args)
        if args.command in ("decrypt", "keygen"):
            return _privacy(args)
    except ConfigError as exc:
        print(f"kefu: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    if args.command == "serve":
        try:
            config = load_config(args.config, overrides=_overrides(args))
            if config.calls.record:
                prepare_dir(recordings_path(config))
            if config.privacy.key_file:
                load_key(config.privacy.key_file)
        except ConfigError as exc:
            print(f"kefu: configuration error: {exc}", file=sys.stderr)  # noqa: T201
            return 2
        try:
            return _serve(config, uvloop_ok=not args.no_uvloop)
        except StateUnavailable as exc:
            hint = "state.redis_url; state.redis_required = false starts degraded instead"
            print(f"kefu: {exc} ({hint})", file=sys.stderr)  # noqa: T201
            return 3
    return 2


if __name__ == "__main__":
    sys.exit(main())

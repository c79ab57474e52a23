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
from kefu.mediaserver.recording import RecordingPolicy, prepare_dir, recordings_path
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
    call = sub.add_parser(
        "call",
        help="place an outbound call on a running server (POST /api/calls)",
        description=CALL_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    call.add_argument("to", metavar="sip:USER@HOST", help="whom to call")
    call.add_argument("--mode", choices=MEDIA_MODES, help="media mode (default: the server's)")
    call.add_argument("--from", dest="from_", metavar="URI_OR_USER", help="kefu's From")
    call.add_argument("--context", metavar="JSON", help="a JSON object the call carries")
    call.add_argument("--server", metavar="URL", help="default: http:// + http.listen")
    call.add_argument(
        "--token",
        metavar="JWT",
        help="agent/admin token (default: $KEFU_TOKEN, "
        "else one minted with this installation's auth.jwt_secret)",
    )
    call.add_argument("--config", metavar="FILE")
    call.add_argument("--no-wait", action="store_true", help="exit once the call is placed")
    call.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        metavar="S",
        help="longest wait for the answer (default 90)",
    )
    call.add_argument("--json", action="store_true", help="print the outcome as one JSON line")
    kb = sub.add_parser("kb", help="knowledge base")
    kb_sub = kb.add_subparsers(dest="kb_command", required=True)
    kb_import = kb_sub.add_parser("import", help="import Markdown, CSV or JSONL files")
    kb_import.add_argument("paths", nargs="+", metavar="PATH")
    kb_import.add_argument("--config", metavar="FILE")
    return parser


CALL_HELP = """\
Places an outbound call through a running kefu's trunk and waits until it is answered or
fails (docs/trunk.md#outbound-calls). Prints the call id, then the outcome.

exit status:
  0  answered (with --no-wait: placed)
  1  not answered: the SIP status and reason are printed (busy, 487 after the ring
     timeout, 401/407 when the trunk refused kefu's credentials...), or --timeout passed
  2  bad arguments, or the server refused the request (400: bad URI, unknown mode...)
  3  the server cannot be reached, refused the token (401/403) or cannot call now (503)
"""


def _call(args: argparse.Namespace) -> int:
    import json
    import os

    from kefu.signaling.call_client import place_call
    from kefu.signaling.tokens import mint_token

    body: dict[str, Any] = {"to": args.to}
    if args.mode:
        body["media_mode"] = args.mode
    if args.from_:
        body["from"] = args.from_
    if args.context is not None:
        try:
            body["context"] = json.loads(args.context)
        except ValueError as exc:
            print(f"kefu: call: --context is not JSON: {exc}", file=sys.stderr)  # noqa: T201
            return 2
    token = args.token or os.environ.get("KEFU_TOKEN")
    server = args.server
    if token is None or server is None:
        config = load_config(args.config)
        token = token or mint_token(jwt_secret(config), "kefu-cli", "agent", 600.0, None)
        server = server or f"http://{config.http.listen}"
    outcome = asyncio.run(
        place_call(server, token, body, wait=not args.no_wait, wait_s=args.timeout)
    )
    code = {"answered": 0, "dialing": 0, "failed": 1, "ended": 1, "timeout": 1}.get(
        outcome.result, 3
    )
    if outcome.result == "refused" and outcome.http_status == 400:
        code = 2
    if args.json:
        line = {
            "result": outcome.result,
            "call_id": outcome.call_id,
            "http_status": outcome.http_status,
            "sip_status": outcome.sip_status,
            "reason": outcome.reason,
            "error": outcome.error,
        }
        print(json.dumps(line))  # noqa: T201
        return code
    if outcome.call_id:
        print(f"call {outcome.call_id} to {args.to}")  # noqa: T201
    if outcome.result == "answered":
        answered = outcome.events[-1]
        print(f"answered in {answered.get('setup_ms')} ms ({answered.get('codec')})")  # noqa: T201
    elif outcome.result == "failed":
        print(f"failed: {outcome.sip_status} {outcome.reason}")  # noqa: T201
    elif outcome.result in ("dialing", "ended", "timeout"):
        print(outcome.result)  # noqa: T201
    else:
        what = outcome.error.get("message") or outcome.reason or outcome.result
        status = f" ({outcome.http_status})" if outcome.http_status else ""
        print(f"kefu: call: {outcome.result}{status}: {what}", file=sys.stderr)  # noqa: T201
    return code


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
    if report.callers:
        print(f"with {report.callers} labelled callers' turns")  # noqa: T201
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
        if args.command == "call":
            return _call(args)
    except ConfigError as exc:
        print(f"kefu: configuration error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    if args.command == "serve":
        try:
            config = load_config(args.config, overrides=_overrides(args))
            if RecordingPolicy.from_config(config.calls).enabled:
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

"""``python -m loadtest SUBCOMMAND``: the SIP trunk, RTP relay and WebRTC load tools.

Run inside a private network namespace, e.g.
``unshare -n sh -c 'ip link set lo up && python3 -m loadtest sip-echo --calls 100'``.
Each subcommand prints a JSON summary and one Markdown table row (see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _emit(summary: dict[str, Any], header: str, row: str, out: str | None) -> None:
    text = json.dumps(summary, indent=2, default=str)
    sys.stdout.write(text + "\n\n" + header + "\n" + row + "\n")
    if out:
        Path(out).write_text(text + "\n")


def _steps(spec: str) -> list[int]:
    """``100:1000:100`` (start:stop:step, stop included) or ``100,200,400``."""
    if ":" in spec:
        start, stop, step = (int(x) for x in spec.split(":"))
        return list(range(start, stop + 1, step))
    return [int(x) for x in spec.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    echo = sub.add_parser("sip-echo", help="N concurrent SIPp echo calls against kefu")
    echo.add_argument("--calls", type=int, default=100, help="concurrent calls (-l N -m N)")
    echo.add_argument("--hold", type=float, default=20.0, help="seconds of audio per call")
    echo.add_argument("--rate", type=float, default=None, help="calls/s (default calls/5)")
    echo.add_argument("--transport", choices=["u1", "t1"], default="u1")
    echo.add_argument("--no-uvloop", action="store_true", help="kefu on stock asyncio")
    echo.add_argument("--sample", type=int, default=10, help="calls whose echo is captured")
    echo.add_argument("--find-max", action="store_true", help="step N, report the largest passing")
    echo.add_argument("--steps", default="100:1000:100", help="N values for --find-max")
    echo.add_argument(
        "--gaps-only",
        action="store_true",
        help="--find-max judges echo loss by sequence gaps only (blind to skipped frames)",
    )
    echo.add_argument("--json", dest="json_out", help="also write the JSON summary here")
    echo.add_argument("--profile", help="py-spy kefu in the steady window into this file")
    echo.add_argument("--keep", help="copy kefu's log and the echo capture into this folder")

    setup = sub.add_parser("sip-setup", help="INVITE -> 200 OK latency at a fixed call rate")
    setup.add_argument("--cps", type=float, default=50.0)
    setup.add_argument("--calls", type=int, default=500)
    setup.add_argument("--no-uvloop", action="store_true")
    setup.add_argument("--json", dest="json_out")

    relay = sub.add_parser("rtp-relay", help="CPU per relayed RTP packet: kefu vs rtpengine")
    relay.add_argument("--streams", type=int, default=100)
    relay.add_argument("--seconds", type=float, default=20.0)
    relay.add_argument("--no-uvloop", action="store_true")
    relay.add_argument("--skip-rtpengine", action="store_true")
    relay.add_argument("--json", dest="json_out")

    from loadtest import webrtc

    webrtc.add_arguments(sub.add_parser("webrtc", help="one aiortc caller: WAV in, WAV out"))

    from loadtest import agent_client

    agent_client.add_arguments(
        sub.add_parser("agent", help="an agent takes over a live call: WAV in, WAV out")
    )

    from loadtest import takeover_bench

    takeover_bench.add_arguments(
        sub.add_parser("takeover", help="agent takeover and hand-back, timed at the SIP caller")
    )

    from loadtest import webrtc_load

    webrtc_load.add_arguments(
        sub.add_parser("webrtc-load", help="rooms of aiortc participants: forwarding load")
    )

    from loadtest import voice

    voice.add_arguments(
        sub.add_parser("voice", help="callers ask kefu's AI questions; latency on the wire")
    )

    from loadtest import avatar_sync

    avatar_sync.add_arguments(
        sub.add_parser("avatar-sync", help="lip-sync offset of the avatar's weights vs the audio")
    )

    from loadtest import avatar_calls

    avatar_calls.add_arguments(
        sub.add_parser("avatar-calls", help="web callers at once, each seeing the avatar")
    )

    from loadtest import outbound

    outbound.add_arguments(
        sub.add_parser("outbound", help="kefu places calls through a digest-challenging SIPp")
    )

    from loadtest import avatar_render

    avatar_render.add_arguments(
        sub.add_parser("avatar-render", help="avatar frame cost: render, VP8 and H.264 encode")
    )

    from loadtest import tls_srtp

    tls_srtp.add_arguments(
        sub.add_parser("tls-srtp", help="TLS handshake ms per connection, SRTP us per packet")
    )

    from loadtest import recording_bench

    recording_bench.add_arguments(
        sub.add_parser("recording", help="call recording on vs off: CPU and bytes per call-minute")
    )

    from loadtest import flood

    flood.add_arguments(
        sub.add_parser("flood", help="INVITE/garbage floods: legit calls and OPTIONS answered")
    )

    from loadtest import hesitation, mandarin_eval, understanding, understanding_cv

    hesitation.add_arguments(
        sub.add_parser("hesitation", help="end of turn: hesitant callers cut off, delays")
    )
    mandarin_eval.add_arguments(
        sub.add_parser("mandarin", help="Mandarin CER, answers and language ID (G.711)")
    )

    understanding.add_arguments(
        sub.add_parser("understanding", help="dialog answers on spoken-style caller utterances")
    )
    understanding_cv.add_arguments(
        sub.add_parser("understanding-cv", help="k-fold cross-validation on the callers' turns")
    )

    events = sub.add_parser("events", help="call events through the bus to /api/events readers")
    events.add_argument("--readers", default="1,50", help="reader counts, e.g. 1,50")
    events.add_argument("--rate", type=float, default=500.0, help="paced events/s")
    events.add_argument("--seconds", type=float, default=10.0, help="paced phase length")
    events.add_argument("--burst", type=int, default=5000, help="events in the burst phase")
    events.add_argument("--queue", type=int, default=256, help="events queued per reader")
    events.add_argument("--json", dest="json_out")

    args = parser.parse_args(argv)
    if args.command == "events":
        import asyncio

        from loadtest import events_bench

        summary = asyncio.run(
            events_bench.run(
                [int(n) for n in args.readers.split(",")],
                args.rate,
                args.seconds,
                args.burst,
                args.queue,
            )
        )
        _emit(summary, *events_bench.table(summary), args.json_out)
        return 0
    if args.command == "tls-srtp":
        return tls_srtp.main(args)
    if args.command == "recording":
        return recording_bench.main(args)
    if args.command == "flood":
        return flood.main(args)
    if args.command == "avatar-render":
        return avatar_render.main(args)
    if args.command == "avatar-calls":
        return avatar_calls.main(args)
    if args.command == "outbound":
        return outbound.main(args)
    if args.command == "avatar-sync":
        return avatar_sync.main(args)
    if args.command == "understanding":
        return understanding.main(args)
    if args.command == "understanding-cv":
        return understanding_cv.main(args)
    if args.command == "mandarin":
        return mandarin_eval.main(args)
    if args.command == "hesitation":
        return hesitation.main(args)
    if args.command == "webrtc":
        return webrtc.main(args)
    if args.command == "agent":
        return agent_client.main(args)
    if args.command == "takeover":
        return takeover_bench.main(args)
    if args.command == "voice":
        return voice.main(args)
    if args.command == "webrtc-load":
        return webrtc_load.main(args)
    if args.command == "sip-echo":
        from loadtest import sip_load

        def run(n: int) -> dict[str, Any]:
            return sip_load.sip_echo(
                n,
                hold=args.hold,
                rate=args.rate,
                transport=args.transport,
                uvloop=not args.no_uvloop,
                sample=args.sample,
                profile=Path(args.profile).resolve() if args.profile else None,
                keep=Path(args.keep).resolve() if args.keep else None,
            )

        if args.find_max:
            print(sip_load.ECHO_HEADER, flush=True)
            result = sip_load.find_max(
                _steps(args.steps),
                run,
                lambda r: print(r, flush=True),
                verdict="pass_gaps_only" if args.gaps_only else "pass",
            )
            rows = "\n".join(sip_load.echo_row(r) for r in result["runs"])
            _emit(result, sip_load.ECHO_HEADER, rows, args.json_out)
            return 0
        summary = run(args.calls)
        if args.profile:
            summary["profile_top_self"] = [
                f"{self_pct:5.1f}% self {incl:5.1f}% incl  {frame}"
                for frame, self_pct, incl in sip_load.top_frames(Path(args.profile))
            ]
        _emit(summary, sip_load.ECHO_HEADER, sip_load.echo_row(summary), args.json_out)
        return 0 if summary["pass"] else 1
    if args.command == "sip-setup":
        from loadtest import sip_load

        summary = sip_load.sip_setup(args.cps, args.calls, uvloop=not args.no_uvloop)
        _emit(summary, sip_load.SETUP_HEADER, sip_load.setup_row(summary), args.json_out)
        return 0 if summary["sipp"]["ok"] else 1
    from loadtest import rtp_relay

    summary = rtp_relay.rtp_relay(
        args.streams,
        args.seconds,
        uvloop=not args.no_uvloop,
        with_rtpengine=not args.skip_rtpengine,
    )
    _emit(summary, rtp_relay.RELAY_HEADER, rtp_relay.relay_row(summary), args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Voice-loop latency through CallAgent with the real models, in process.

Run with ``python3 -m pytest loadtest/bench_agent.py --benchmark-enable -s`` (or as a script).
As a script: ``python -m loadtest.bench_agent [--lang en|zh] [--emotion on|off]``. Spoken
questions (piper; Mandarin: Kokoro, loadtest/mandarin_voice.py) go in as 8 kHz frames in real
time, as from a G.711 leg; the bot's
outbound track is pulled at real time by a fake sender. Each turn's TurnTrace gives the
response latency (caller's speech end → first outbound frame) and the per-stage breakdown;
p50/p95 over ≥ 20 turns are printed and stored in the benchmark's extra_info.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTIONS = (
    "What are your opening hours?",
    "How do I return an item?",
    "Can I pay with PayPal?",
    "Where is my order?",
    "How long does delivery take?",
    "How much does shipping cost?",
    "When will I get my refund?",
    "Do you take gift cards?",
    "How do I change my address?",
    "I forgot my password.",
    "Is there parking at the store?",
    "What does the warranty cover?",
    "Can I pay in instalments?",
    "Are you open on public holidays?",
    "Can I pick up my order in store?",
    "I was charged twice.",
    "My account is locked.",
    "Do you deliver on weekends?",
    "How do I delete my account?",
    "Can I exchange an item for a different size?",
)
QUESTIONS_ZH = (
    "你们门店几点开门？",
    "退款多久能到账？",
    "可以用支付宝付款吗？",
    "我的快递到哪里了？",
    "送货一般要几天？",
    "运费怎么算？",
    "怎么退货？",
    "可以换货吗？",
    "怎么修改收货地址？",
    "忘记密码了怎么办？",
    "门店可以停车吗？",
    "保修多久？",
    "可以分期付款吗？",
    "节假日营业吗？",
    "可以到店自提吗？",
    "我被重复扣款了。",
    "我的账号被锁定了。",
    "周末送货吗？",
    "怎么注销账号？",
    "收不到验证码怎么办？",
)
TURNS_PER_CALL = 4


def _harness() -> Any:
    """The fake caller/sender of the agent tests (loaded by path: tests are not a package)."""
    path = Path(__file__).resolve().parent.parent / "tests/ai_bridge/agent/conftest.py"
    spec = importlib.util.spec_from_file_location("agent_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_harness"] = module
    spec.loader.exec_module(module)
    return module


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


async def run_turns(lang: str = "en", emotion: bool = True) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from kefu.ai_bridge.agent import CallAgent, Utterance
    from kefu.ai_bridge.listen.heldout import piper_voice, speak
    from kefu.ai_bridge.services import AiServices, AiSettings
    from kefu.ai_bridge.trace import TurnTrace

    h = _harness()
    questions = QUESTIONS if lang == "en" else QUESTIONS_ZH
    if lang == "en":
        voice = piper_voice()
        audio = {q: speak(voice, q, noise_scale=0.5) for q in questions}
    else:
        from loadtest.mandarin_voice import speak_zh

        audio = {q: speak_zh(q) for q in questions}
    services = await AiServices.start(
        AiSettings(
            language=lang, emotion=emotion, cache_dir=tempfile.mkdtemp(prefix="kefu-bench-")
        ),
        registry=CollectorRegistry(),
    )
    assert services.ready, services.readiness()
    traces: list[TurnTrace] = []
    unanswered: list[str] = []
    try:
        for start in range(0, len(questions), TURNS_PER_CALL):
            caller, bus = h.FakeCaller(), h.Bus()
            agent = CallAgent(services, f"bench-{start}", caller, publish=bus, paced_output=False)
            sender = h.FakeSender(agent.outbound)
            await agent.start()
            sender.start()
            try:
                for turn, q in enumerate(questions[start : start + TURNS_PER_CALL], 1):
                    await sender.fast_forward(agent)
                    caller.say(audio[q])
                    try:
                        await bus.wait(
                            Utterance, lambda e, t=turn: e.speaker == "bot" and e.turn_id == t, 30
                        )
                    except TimeoutError:  # heard as nothing (empty transcript): no answer
                        unanswered.append(q)
                        continue
                    await sender.fast_forward(agent)
                    trace = await bus.wait(TurnTrace, lambda e, t=turn: e.turn_id == t, 10)
                    traces.append(trace)
            finally:
                await agent.close()
                await sender.stop()
                caller.stop()
    finally:
        await services.close()
    return {**summarize(traces), "unanswered": unanswered}


def summarize(traces: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"turns": len(traces)}
    for stage in ("response", "endpoint", "asr", "dialog", "tts", "playout"):
        values = [v for t in traces if (v := t.stages_ms()[stage]) is not None]
        if values:
            out[stage] = {
                "p50_ms": round(percentile(values, 50), 1),
                "p95_ms": round(percentile(values, 95), 1),
                "mean_ms": round(statistics.fmean(values), 1),
                "max_ms": round(max(values), 1),
            }
    out["sources"] = sorted({t.source for t in traces})
    out["kb_answers"] = sum(t.source == "kb" for t in traces)
    out["speculative_share"] = round(sum(t.speculative for t in traces) / len(traces), 2)
    return out


def report(summary: dict[str, Any]) -> None:
    print(f"\nCallAgent voice loop, {summary['turns']} turns (8 kHz caller, real time):")
    for stage in ("response", "endpoint", "asr", "dialog", "tts", "playout"):
        s = summary.get(stage)
        if s:
            print(
                f"  {stage:9s} p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  "
                f"mean {s['mean_ms']:7.1f}  max {s['max_ms']:7.1f}"
            )
    print(f"  sources {summary['sources']}, speculative ASR {summary['speculative_share']:.0%}")


def test_agent_response_latency(benchmark: Any) -> None:
    summaries: list[dict[str, Any]] = []
    benchmark.pedantic(lambda: summaries.append(asyncio.run(run_turns())), rounds=1, iterations=1)
    summary = summaries[0]
    benchmark.extra_info.update(summary)
    report(summary)
    assert summary["turns"] >= 20


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", default="en", choices=("en", "zh"))
    parser.add_argument("--emotion", default="on", choices=("on", "off"))
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    result = asyncio.run(run_turns(args.lang, args.emotion == "on"))
    report(result)
    print(f"  answered from the KB: {result['kb_answers']} of {result['turns']}")
    if args.json_out:
        import json

        Path(args.json_out).write_text(json.dumps(result, indent=2))

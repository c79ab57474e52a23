"""BotAudioTrack, CallerAudioTap and the trace outlets, without models (hand-driven clock)."""

from __future__ import annotations

import asyncio
import fractions
import json

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from prometheus_client import CollectorRegistry

from kefu.ai_bridge.events import BargeIn
from kefu.ai_bridge.trace import InteractionLog, TurnMetrics, TurnTrace, TurnTracer
from kefu.ai_bridge.tracks import OUTPUT_RATE, BotAudioTrack, CallerAudioTap, frame_to_mono_s16
from kefu.mediaserver.bus import EventBus


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def track(**kw: object) -> tuple[BotAudioTrack, Clock, list[tuple[object, float]]]:
    clock = Clock()
    marks: list[tuple[object, float]] = []
    t = BotAudioTrack(paced=False, clock=clock, on_mark=lambda m, at: marks.append((m, at)), **kw)
    return t, clock, marks


async def test_silence_when_idle_and_frame_format() -> None:
    t, _, _ = track()
    f1 = await t.recv()
    f2 = await t.recv()
    assert f1.sample_rate == OUTPUT_RATE and f1.samples == 441
    assert f1.format.name == "s16" and f1.layout.name == "mono"
    assert f1.time_base == fractions.Fraction(1, OUTPUT_RATE)
    assert (f1.pts, f2.pts) == (0, 441)
    assert not f1.to_ndarray().any()


async def test_queued_audio_goes_out_in_order_with_marks() -> None:
    t, clock, marks = track()
    pcm = np.arange(1, 1001, dtype=np.int16)
    t.put_nowait(pcm, OUTPUT_RATE, mark="start")
    t.put_nowait(np.zeros(0, np.int16), OUTPUT_RATE, mark="end")
    assert t.queued_samples == 1000 and t.speaking
    out = []
    for _ in range(3):
        clock.t += 0.02
        out.append((await t.recv()).to_ndarray().reshape(-1))
    assert marks[0] == ("start", 100.02)
    assert marks[1][0] == "end" and marks[1][1] == pytest.approx(100.06)
    joined = np.concatenate(out)
    assert np.array_equal(joined[:1000], pcm) and not joined[1000:].any()
    assert t.queued_samples == 0 and t.speech_frames == 3


async def test_other_rates_are_resampled_once() -> None:
    t, _, _ = track()
    t.put_nowait(np.ones(16000, np.int16) * 1000, 16000)
    assert abs(t.queued_samples - OUTPUT_RATE) <= 2


async def test_flush_drops_everything_and_pause_holds() -> None:
    t, _, marks = track()
    t.put_nowait(np.ones(4410, np.int16), OUTPUT_RATE, mark="a")
    t.pause()
    assert not (await t.recv()).to_ndarray().any()
    assert t.queued_samples == 4410 and not marks  # held, not dropped
    t.resume()
    assert (await t.recv()).to_ndarray().all()
    dropped = t.flush()
    assert dropped == 4410 - 441 and t.queued_samples == 0 and t.flushed_samples == dropped
    assert not (await t.recv()).to_ndarray().any()


async def test_put_waits_for_room_and_put_nowait_counts_drops() -> None:
    t, _, _ = track(max_queued_s=0.1)  # 2205 samples
    t.put_nowait(np.ones(2000, np.int16), OUTPUT_RATE)
    assert not t.put_nowait(np.ones(1000, np.int16), OUTPUT_RATE)
    assert t.dropped_samples == 1000
    waiter = asyncio.ensure_future(t.put(np.ones(1000, np.int16), OUTPUT_RATE))
    await asyncio.sleep(0)
    assert not waiter.done()
    for _ in range(3):
        await t.recv()
    await asyncio.wait_for(waiter, 1)
    assert t.queued_samples == 2000 - 3 * 441 + 1000


async def test_paced_recv_runs_at_real_time() -> None:
    t = BotAudioTrack()
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(6):
        await t.recv()
    assert 0.09 <= loop.time() - start < 0.2
    t.stop()
    with pytest.raises(MediaStreamError):
        await t.recv()


def _frame(data: np.ndarray, fmt: str, layout: str, rate: int) -> av.AudioFrame:
    f = av.AudioFrame.from_ndarray(data, format=fmt, layout=layout)
    f.sample_rate = rate
    return f


def test_frame_to_mono_handles_layouts() -> None:
    mono = _frame(np.full((1, 160), 1000, np.int16), "s16", "mono", 8000)
    assert frame_to_mono_s16(mono).tolist() == [1000] * 160
    stereo = np.zeros((1, 960 * 2), np.int16)
    stereo[0, 0::2], stereo[0, 1::2] = 2000, 0
    assert set(frame_to_mono_s16(_frame(stereo, "s16", "stereo", 48000)).tolist()) == {1000}
    planar = np.full((2, 480), 0.25, np.float32)
    out = frame_to_mono_s16(_frame(planar, "fltp", "stereo", 48000))
    assert out.shape == (480,) and set(out.tolist()) == {8192}


class ListTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self, frames: list[av.AudioFrame]) -> None:
        super().__init__()
        self.frames = frames

    async def recv(self) -> av.AudioFrame:
        if not self.frames:
            raise MediaStreamError
        return self.frames.pop(0)


async def test_tap_converts_8k_to_16k_and_ends_cleanly() -> None:
    t = np.arange(8000) / 8000
    tone = (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
    frames = [
        _frame(tone[i : i + 160].reshape(1, -1), "s16", "mono", 8000) for i in range(0, 8000, 160)
    ]
    got: list[tuple[np.ndarray, float]] = []
    tap = CallerAudioTap(ListTrack(frames), lambda pcm, now: got.append((pcm, now)))
    await asyncio.wait_for(tap.start(), 2)
    assert tap.ended.is_set() and tap.frames == 50
    total = sum(len(p) for p, _ in got)
    assert 16000 - 640 <= total <= 16000 and all(len(p) == 320 for p, _ in got)
    assert all(p.dtype == np.int16 for p, _ in got)


def _trace(**kw: object) -> TurnTrace:
    base: dict[str, object] = dict(
        call_id="c1",
        turn_id=1,
        speech_end=10.0,
        end_of_turn=10.25,
        asr_final=10.3,
        answer_chosen=10.32,
        first_tts_audio=10.45,
        first_packet=10.47,
        transcript="hi",
        intent="greeting",
        source="greeting",
        answer_text="Hello!",
        barge_in=False,
    )
    base.update(kw)
    return TurnTrace(**base)  # type: ignore[arg-type]


def test_trace_stages_and_metrics() -> None:
    tr = _trace()
    assert tr.response_s == pytest.approx(0.47)
    assert tr.stages_ms() == {
        "response": 470.0,
        "endpoint": 250.0,
        "asr": 50.0,
        "dialog": 20.0,
        "tts": 130.0,
        "playout": 20.0,
    }
    assert _trace(first_packet=None).response_s is None
    reg = CollectorRegistry()
    metrics = TurnMetrics(reg)
    metrics.observe(tr)
    metrics.observe_barge_in(0.18)
    assert reg.get_sample_value("kefu_turn_response_seconds_count") == 1
    assert reg.get_sample_value("kefu_turn_response_seconds_sum") == pytest.approx(0.47)
    assert reg.get_sample_value("kefu_turn_asr_seconds_count") == 1
    assert reg.get_sample_value("kefu_turn_barge_in_stop_seconds_count") == 1
    assert reg.get_sample_value("kefu_turns_total", {"source": "greeting"}) == 1


async def test_interaction_log_reads_traces_off_loop(tmp_path) -> None:
    path = tmp_path / "log" / "turns.jsonl"
    ilog = InteractionLog(path)
    metrics = TurnMetrics(CollectorRegistry())
    bus = EventBus()
    bus.attach(ilog.read)
    bus.attach(metrics.read)
    tracer = TurnTracer("c9", publish=bus.publish)
    m = tracer.marks(3)
    m.speech_end, m.first_packet, m.transcript, m.source = 1.0, 1.6, "where is my order", "kb"
    trace = tracer.finish(3, barge_in=True)
    assert trace is not None and tracer.finish(3) is None
    bus.publish(BargeIn("c9", 4, 2.0, 2.15, 150.0, 800.0))  # not a turn: no line
    await ilog.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["call_id"] == "c9" and rec["turn_id"] == 3 and rec["barge_in"] is True
    assert rec["transcript"] == "where is my order" and rec["stages_ms"]["response"] == 600.0
    reg = metrics.registry
    assert reg.get_sample_value("kefu_turns_total", {"source": "kb"}) == 1
    assert reg.get_sample_value("kefu_turn_barge_in_stop_seconds_sum") == pytest.approx(0.15)

"""Prometheus metrics of one server, on a registry of its own (no module-level state)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kefu.ai_bridge.events import AvatarQualityChanged


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active_calls = Gauge("kefu_active_calls", "Calls not yet ended", registry=r)
        self.calls_total = Counter(
            "kefu_calls_total", "Calls by how they ended", ["result"], registry=r
        )
        self.sip_requests = Counter(
            "kefu_sip_requests_total", "SIP requests received", ["method"], registry=r
        )
        self.sip_responses_sent = Counter(
            "kefu_sip_responses_sent_total", "SIP responses sent", ["status"], registry=r
        )
        self.sip_dropped = Counter(
            "kefu_sip_dropped_total", "SIP datagrams dropped", ["reason"], registry=r
        )
        self.rtp_packets = Counter(
            "kefu_rtp_packets_total", "RTP packets", ["direction"], registry=r
        )
        self.rtp_dropped = Counter(
            "kefu_rtp_dropped_total", "RTP packets dropped", ["reason"], registry=r
        )
        self.rtp_lost = Counter(
            "kefu_rtp_packets_lost_total", "RTP packets lost (sequence gaps)", registry=r
        )
        self.rtp_jitter = Histogram(
            "kefu_rtp_jitter_seconds",
            "Interarrival jitter per call at hang-up (RFC 3550 A.8)",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2),
            registry=r,
        )
        self.dtmf = Counter("kefu_dtmf_total", "DTMF digits received", ["source"], registry=r)
        self.recordings = Counter(
            "kefu_recordings_total", "Call recordings finished, by result", ["result"], registry=r
        )
        self.loop_lag = Histogram(
            "kefu_event_loop_lag_seconds",
            "How late the event loop ran a 100 ms timer",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.avatar_steps = Counter(
            "kefu_avatar_quality_steps_total",
            "Avatar degradation-ladder steps, by the level stepped to and why",
            ["level", "reason"],
            registry=r,
        )
        self.invite_to_answer = Histogram(
            "kefu_invite_answer_seconds",
            "INVITE received to 200 OK sent",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.outbound_setup = Histogram(
            "kefu_outbound_setup_seconds",
            "Outbound calls: first INVITE sent to 2xx received (challenges, redirects included)",
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.outbound_calls = Counter(
            "kefu_outbound_calls_total", "Outbound calls by outcome", ["result"], registry=r
        )

    def count_event(self, event: object) -> None:
        """A bus sink for the counters kept from call events (the avatar's quality steps)."""
        if isinstance(event, AvatarQualityChanged):
            self.avatar_steps.labels(event.level, event.reason).inc()

    def watch_sfu(self, stats: Callable[[], dict[str, int]]) -> None:
        """Export the SFU's own counters (read at scrape time) as kefu_webrtc_*."""
        self.registry.register(_SfuCollector(stats))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def watch_loop_lag(self, interval: float = 0.1) -> None:
        """Runs until cancelled; owned by the server."""
        while True:
            start = time.perf_counter()
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, time.perf_counter() - start - interval))


_SFU_GAUGES = frozenset({"rooms", "participants"})


class _SfuCollector:
    def __init__(self, stats: Callable[[], dict[str, int]]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        for name, value in sorted(self._stats().items()):
            if name in _SFU_GAUGES:
                yield GaugeMetricFamily(f"kefu_webrtc_{name}", f"WebRTC {name} now", value=value)
            else:
                yield CounterMetricFamily(
                    f"kefu_webrtc_{name}", f"WebRTC {name.replace('_', ' ')}", value=value
                )

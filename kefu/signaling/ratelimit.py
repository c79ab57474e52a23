"""Token buckets keyed by IP or user: sans-IO (``now`` passed in), bounded memory.

A bucket that has refilled to its burst is indistinguishable from a fresh one, so it is
forgotten ("idle"); buckets are kept in least-recently-used order and the oldest idle ones
are dropped as new keys come. If more than ``max_keys`` keys are busy at once the least
recently used busy bucket is dropped too (counted in ``evicted_busy``): that key gets a
fresh burst, which is the price of bounded memory under a flood of distinct keys.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateSpec:
    """A token bucket: ``rate`` tokens per second, at most ``burst`` saved up."""

    rate: float
    """Refill rate, tokens per second."""
    burst: float
    """Bucket capacity (and the initial amount)."""


class RateLimiter:
    """Many token buckets sharing one spec."""

    def __init__(self, spec: RateSpec, *, max_keys: int = 10_000) -> None:
        if spec.rate <= 0 or spec.burst < 1 or max_keys < 1:
            raise ValueError("rate must be > 0, burst >= 1, max_keys >= 1")
        self.spec = spec
        self.max_keys = max_keys
        # key -> (tokens, time of last update); insertion order = least recently used first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self.denied = 0
        self.evicted_idle = 0
        self.evicted_busy = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def _level(self, key: str, now: float) -> float:
        entry = self._buckets.get(key)
        if entry is None:
            return self.spec.burst
        tokens, last = entry
        return min(self.spec.burst, tokens + max(0.0, now - last) * self.spec.rate)

    def allow(self, key: str, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens from ``key``'s bucket if it has them."""
        level = self._level(key, now)
        allowed = level >= cost
        if allowed:
            level -= cost
        else:
            self.denied += 1
        self._buckets[key] = (level, now)
        self._buckets.move_to_end(key)
        self._evict(now)
        return allowed

    def _evict(self, now: float) -> None:
        while self._buckets:
            oldest = next(iter(self._buckets))
            if self._level(oldest, now) >= self.spec.burst:
                del self._buckets[oldest]
                self.evicted_idle += 1
            elif len(self._buckets) > self.max_keys:
                del self._buckets[oldest]
                self.evicted_busy += 1
            else:
                break

    def sweep(self, now: float) -> None:
        """Forget every idle bucket (callers may run this from a timer)."""
        for key in [k for k in self._buckets if self._level(k, now) >= self.spec.burst]:
            del self._buckets[key]
            self.evicted_idle += 1

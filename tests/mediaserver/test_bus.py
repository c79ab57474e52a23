"""The event bus: sinks never lose an event, subscriptions are bounded and drop the oldest."""

from __future__ import annotations

from kefu.mediaserver.bus import EventBus


def test_a_sink_sees_every_event_while_a_stalled_subscription_drops_the_oldest() -> None:
    bus = EventBus(queue_size=4)
    seen: list[object] = []
    bus.attach(seen.append)
    sub = bus.subscribe()
    for n in range(100):
        bus.publish(n)
    assert seen == list(range(100))
    assert sub.dropped == 96 and sub.take_dropped() == 96 and sub.take_dropped() == 0
    assert [sub.queue.get_nowait() for _ in range(4)] == [96, 97, 98, 99]


def test_a_failing_sink_is_logged_and_the_other_readers_still_get_the_event(capsys) -> None:
    bus = EventBus()
    after: list[object] = []

    def broken(event: object) -> None:
        raise ValueError(f"cannot read {event}")

    bus.attach(broken)
    bus.attach(after.append)
    sub = bus.subscribe()
    bus.publish("one")
    bus.publish("two")
    assert after == ["one", "two"] and sub.queue.qsize() == 2
    logged = capsys.readouterr().out
    # One line per failure (the traceback below it may repeat the name, e.g. rich's locals).
    failures = [line for line in logged.splitlines() if "] bus_sink_failed" in line]
    assert len(failures) == 2 and "cannot read one" in logged


def test_sinks_run_in_the_order_attached_and_detach_stops_them() -> None:
    bus = EventBus()
    order: list[str] = []

    def first(event: object) -> None:
        order.append(f"first:{event}")

    def second(event: object) -> None:
        order.append(f"second:{event}")

    bus.attach(first)
    bus.attach(second)
    bus.publish(1)
    bus.detach(first)
    bus.detach(first)  # detaching twice is harmless
    bus.publish(2)
    assert order == ["first:1", "second:1", "second:2"]


def test_a_subscription_filter_decides_what_is_queued() -> None:
    bus = EventBus()
    sub = bus.subscribe(lambda e: isinstance(e, int) and e % 2 == 0)
    for n in range(6):
        bus.publish(n)
    assert [sub.queue.get_nowait() for _ in range(sub.queue.qsize())] == [0, 2, 4]
    bus.unsubscribe(sub)
    bus.publish(8)
    assert sub.queue.empty() and bus.subscriber_count == 0

"""The voice engines' worker: answers' first clauses before later clauses (deterministic)."""

from __future__ import annotations

import threading
from functools import partial

import pytest

from kefu.ai_bridge.speak.clause_executor import ClauseExecutor, background, first_clause


def _blocked(pool: ClauseExecutor) -> threading.Event:
    """Occupy the worker until the returned event is set (jobs queue up meanwhile)."""
    gate, started = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(10)

    pool.submit(hold)
    assert started.wait(10)
    return gate


def test_a_first_clause_overtakes_later_clauses_already_queued() -> None:
    pool = ClauseExecutor("test")
    ran: list[str] = []
    gate = _blocked(pool)
    later = [pool.submit(partial(ran.append, f"call-a clause {i}")) for i in (2, 3, 4)]
    first_b = pool.submit(first_clause(partial(ran.append, "call-b clause 1")))
    first_c = pool.submit(first_clause(partial(ran.append, "call-c clause 1")))
    gate.set()
    for future in (*later, first_b, first_c):
        future.result(10)
    assert ran == [
        "call-b clause 1",
        "call-c clause 1",
        "call-a clause 2",
        "call-a clause 3",
        "call-a clause 4",
    ]
    pool.shutdown()


def test_a_cancelled_clause_never_runs_and_errors_reach_the_caller() -> None:
    pool = ClauseExecutor("test")
    ran: list[int] = []
    gate = _blocked(pool)
    dropped = pool.submit(partial(ran.append, 1))
    kept = pool.submit(partial(ran.append, 2))
    assert dropped.cancel()  # barge-in before it started
    broken = pool.submit(partial(int, "not a number"))
    gate.set()
    kept.result(10)
    with pytest.raises(ValueError):
        broken.result(10)
    assert ran == [2]
    pool.shutdown()


def test_shutdown_cancels_what_waits_and_refuses_new_work() -> None:
    pool = ClauseExecutor("test")
    gate = _blocked(pool)
    waiting = pool.submit(partial(sum, [1, 2]))
    pool.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(partial(sum, [3]))
    gate.set()


def test_arguments_are_passed_and_results_returned() -> None:
    pool = ClauseExecutor("test")
    assert pool.submit(pow, 2, 10).result(10) == 1024
    assert pool.submit(first_clause(partial(max, 3, 9))).result(10) == 9
    pool.shutdown()


def test_background_work_waits_for_every_live_clause() -> None:
    pool = ClauseExecutor("test", quiet_s=0.05)
    ran: list[str] = []
    gate = _blocked(pool)
    warm = [pool.submit(background(partial(ran.append, f"warm {i}"))) for i in (1, 2)]
    later = pool.submit(partial(ran.append, "call-a clause 2"))
    first = pool.submit(first_clause(partial(ran.append, "call-b clause 1")))
    gate.set()
    for future in (*warm, later, first):
        future.result(10)
    assert ran == ["call-b clause 1", "call-a clause 2", "warm 1", "warm 2"]
    pool.shutdown()


def test_background_work_waits_while_a_call_is_being_answered() -> None:
    pool = ClauseExecutor("test", quiet_s=30.0)
    ran: list[str] = []
    warm = pool.submit(background(partial(ran.append, "warm")))
    warm.result(10)  # nobody answered yet: it runs at once
    pool.submit(first_clause(partial(ran.append, "call-a clause 1"))).result(10)
    later = pool.submit(background(partial(ran.append, "warm after")))
    with pytest.raises(TimeoutError):
        later.result(0.3)  # an answer began: the warm-up waits for a lull
    pool.submit(partial(ran.append, "call-a clause 2")).result(10)  # live work still runs
    assert ran == ["warm", "call-a clause 1", "call-a clause 2"]
    pool.shutdown(cancel_futures=True)
    assert later.cancelled()

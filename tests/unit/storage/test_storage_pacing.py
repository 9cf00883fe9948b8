"""The AIMD gate of cache downloads (K21) and the hedging threshold (K22)."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import StorageTimeoutError
from shardkit.storage.pacing import Pacing


def never() -> bool:
    return False


def always() -> bool:
    return True


events = st.lists(st.sampled_from(["enter", "ok", "throttled", "failed"]), max_size=200)


@settings(max_examples=60, deadline=None)
@given(ceiling=st.integers(1, 16), ops=events)
def test_the_limit_stays_within_one_and_the_ceiling_and_admits_no_more_than_it_k21(
    ceiling: int, ops: list[str]
) -> None:
    pacing = Pacing(ceiling)
    open_requests: list[float] = []
    for op in ops:
        if op == "enter":
            started = pacing.enter(1.0, always)  # never waits: cancelled when the gate is full
            assert (started is None) == (len(open_requests) >= pacing.current)
            if started is not None:
                open_requests.append(started)
        elif open_requests:
            before = pacing.current
            pacing.leave(open_requests.pop(0), ok=op == "ok", throttled=op == "throttled")
            if op == "throttled":
                assert pacing.current <= before
            else:
                assert pacing.current >= before
        assert 1 <= pacing.current <= ceiling
        assert pacing.in_flight == len(open_requests) and pacing.lowest <= pacing.current


def test_a_burst_of_throttles_from_one_window_halves_once_then_successes_restore_it_k21() -> None:
    pacing = Pacing(8)
    window = [pacing.enter(1.0, never) for _ in range(8)]
    for started in window:  # all 8 answered 503 SlowDown
        pacing.leave(started, ok=False, throttled=True)  # type: ignore[arg-type]
    assert pacing.current == 4 and pacing.decreases == 1 and pacing.throttled == 8
    throttled_again = pacing.enter(1.0, never)
    pacing.leave(throttled_again, ok=False, throttled=True)  # type: ignore[arg-type]
    assert pacing.current == 1 and pacing.decreases == 2  # a later request: halve again
    successes, window = 0, [pacing.enter(1.0, never)]
    while pacing.current < 8:  # the gate kept full, as by a download with parts waiting
        pacing.leave(window.pop(0), ok=True)  # type: ignore[arg-type]
        successes += 1
        while len(window) < pacing.current:
            window.append(pacing.enter(1.0, never))
    assert successes == 1 + 2 + 3 + 4 + 5 + 6 + 7  # one more per window of successes
    assert pacing.lowest == 1


def test_successes_below_the_limit_do_not_raise_it() -> None:
    pacing = Pacing(4)
    pacing.leave(pacing.enter(1.0, never), ok=False, throttled=True)  # type: ignore[arg-type]
    assert pacing.current == 1
    pacing.limit = 2
    for _ in range(20):  # one request at a time never fills a gate of 2
        pacing.leave(pacing.enter(1.0, never), ok=True)  # type: ignore[arg-type]
    assert pacing.current == 2


def test_a_full_gate_waits_for_room_and_times_out_naming_the_limit() -> None:
    pacing = Pacing(1)
    held = pacing.enter(1.0, never)
    released = threading.Timer(0.1, lambda: pacing.leave(held, ok=True))  # type: ignore[arg-type]
    released.start()
    assert pacing.enter(5.0, never) is not None  # admitted once the first one left
    with pytest.raises(StorageTimeoutError, match="1 download requests"):
        pacing.enter(0.1, never)
    assert pacing.enter(0.1, never, hedge=True) is not None  # stands in for a late one (K22)
    assert pacing.in_flight == 2


def test_hedging_waits_for_a_multiple_of_the_median_part_time_never_less_than_the_floor_k22() -> None:
    pacing = Pacing(4)
    assert pacing.hedge_after(0.5, 4.0) == 0.5  # nothing measured yet
    for _ in range(3):
        pacing.leave(time.monotonic() - 1.0, ok=True)  # parts of about 1 s
    assert pacing.hedge_after(0.5, 4.0) == pytest.approx(4.0, abs=0.1)
    assert pacing.hedge_after(10.0, 4.0) == 10.0

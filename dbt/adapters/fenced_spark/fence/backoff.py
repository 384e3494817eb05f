"""The fence's back-off, before a retry (`fence_retries`) or before sending a write again
(verify.Overtaken): a random share of a few turns, a turn being a commit landing on the table
or an attempt's length of time without one. protocol.py waits through it; nothing here reads
more of the table than its version."""

import random
from collections.abc import Callable
from contextlib import suppress

from dbt.adapters.fenced_spark.fence.history import HistoryReader
from dbt.adapters.fenced_spark.fence.state import FenceState

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 20.0
BACKOFF_MAX_TURNS = 16


def backoff_turns(retry: int, rng: Callable[[], float] = random.random) -> float:
    """Exponential backoff with full jitter, counted in turns: losers only stop colliding once
    their window is wider than the writers that want the table."""
    return rng() * min(BACKOFF_MAX_TURNS, 2**retry)


def wait_turns(
    log: HistoryReader,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    state: FenceState,
    turns: float,
    slot: float,
) -> None:
    """Turns are counted in commits after the version the refused attempt expected, or in
    `slot`s (an attempt's length) of waiting, whichever runs ahead. Under contention the
    wait follows the commit rate (an attempt slowed by the others would otherwise stretch
    every wait), and the commits that landed during the refused attempt are turns already
    taken; on a quiet table it is time."""
    started = clock()
    deadline = started + min(BACKOFF_CAP_SECONDS, turns * slot)
    known = state.expected_version

    def left() -> float:
        return turns - max(known - state.expected_version, (clock() - started) / slot)

    # Time is checked before each read: the retry's recapture reads the version right
    # after, so a read once the wait is over would be a Spark job for nothing over SQL.
    while left() > 0 and clock() < deadline:
        polled = clock()
        with suppress(Exception):  # the retry's own recapture reports what is wrong
            known = max(known, log.latest_version(state.table, known))
        # Over SQL a history read is a Spark job: poll for at most a tenth of the time.
        poll = max(slot / 4, 10 * (clock() - polled))
        if left() > 0:
            sleep(max(0.0, min(poll, left() * slot, deadline - clock())))

"""The bootstrap interval of the median that bench/report.py prints for part 1, and what the
fence's own time counts."""

import itertools
import random
import statistics
from collections import Counter
from types import SimpleNamespace

from bench.pairs import (
    SET_RESET,
    FenceClock,
    carryover_balanced,
    median_interval,
    server_order,
)


def test_interval_contains_the_median() -> None:
    rng = random.Random(1)
    for n in (5, 15, 16, 40):
        ratios = [rng.gauss(1.0, 0.06) for _ in range(n)]
        low, high = median_interval(ratios)
        assert low <= statistics.median(ratios) <= high


def test_interval_narrows_with_more_pairs() -> None:
    rng = random.Random(2)
    ratios = [rng.gauss(1.0, 0.06) for _ in range(400)]
    widths = [high - low for low, high in (median_interval(ratios[:n]) for n in (15, 60, 400))]
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] < widths[0] / 2


def test_known_interval() -> None:
    # 1..15: the exact bootstrap distribution's 2.5% and 97.5% points are 4 and 12
    # (P(median <= 4) = 0.0254, P(median <= 11) = 0.9746).
    assert median_interval(list(range(1, 16))) == (4, 12)
    assert median_interval([1.02] * 15) == (1.02, 1.02)


def test_fixed_seed_redraws_the_same() -> None:
    ratios = [0.91, 1.10, 0.97, 1.03, 1.0, 0.95, 1.06]
    assert median_interval(ratios) == median_interval(list(ratios))


def test_a_conf_call_that_sent_nothing_is_not_counted_as_a_statement():
    sent = [0]
    runner = SimpleNamespace(connections=SimpleNamespace(statements_sent=lambda: sent[0]))

    def send_conf(runner, key, value):
        if value is not None:  # a RESET that waits for a later statement sends nothing
            sent[0] += 1

    clock = FenceClock()
    timed = clock._timed_conf(send_conf)
    timed(runner, "k", "v")
    timed(runner, "k", None)
    seconds, counts = clock.take()
    assert counts[SET_RESET] == 1 and seconds[SET_RESET] >= 0


def test_each_server_run_follows_each_other_equally_often_over_a_cycle() -> None:
    for names in (["s", "p", "t", "c"], ["s", "p", "t"], ["s", "t", "tn", "c", "cn"]):
        cycle = len(names) * (1 if len(names) % 2 == 0 else 2)
        orders = [carryover_balanced(names, batch) for batch in range(1, cycle + 1)]
        assert all(sorted(order) == sorted(names) for order in orders)
        follows = Counter((a, b) for order in orders for a, b in itertools.pairwise(order))
        assert set(follows) == {(a, b) for a in names for b in names if a != b}
        assert len(set(follows.values())) == 1
        places = Counter((i, name) for order in orders for i, name in enumerate(order))
        assert len(set(places.values())) == 1
        assert carryover_balanced(names, cycle + 1) == orders[0]


def test_thrift_and_connect_runs_never_share_a_batch() -> None:
    for batch in range(1, 13):
        assert sorted(server_order(batch, ("thrift",))) == ["stock", "stock_poll_1s", "thrift"]
        assert sorted(server_order(batch, ("connect",), ("thrift",))) == ["connect", "stock"]
    assert server_order(1, ("connect",), ("thrift",)) != server_order(2, ("connect",), ("thrift",))


def test_a_batch_never_starts_with_the_run_that_ended_the_batch_before() -> None:
    for names in (["s", "p", "t"], ["s", "p", "t", "c"], ["s", "t", "tn", "c", "cn"]):
        cycle = len(names) * (1 if len(names) % 2 == 0 else 2)
        orders = [carryover_balanced(names, batch) for batch in range(1, cycle + 1)]
        seams = Counter(
            (orders[i][-1], orders[(i + 1) % cycle][0]) for i in range(cycle)
        )  # the cycle wraps round: batch cycle + 1 is batch 1's order again
        assert all(a != b for a, b in seams) and max(seams.values()) == 1
    orders = [carryover_balanced(["s", "p", "t"], batch) for batch in range(1, 7)]
    seams = {(orders[i][-1], orders[(i + 1) % 6][0]) for i in range(6)}
    assert len(seams) == 6  # three runs: each ordered pair once at a seam

"""The bootstrap interval of the median that bench/report.py prints for part 1."""

import random
import statistics

from bench.pairs import median_interval


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

"""bench/start.py (part 9): the class archive read from the adapter's own log lines, the ratio
per round, the target's verdict, and the section kept when a run of other parts redraws."""

import inspect

from bench import report, start
from bench.start import Start
from dbt.adapters.fenced_spark import class_archive


def starts(pairs: list[tuple[float, float]], kind: str = "warm") -> list[Start]:
    out = []
    for n, (stock, fenced) in enumerate(pairs):
        out.append(Start(kind, "stock", n, stock, stock + 1, True))
        out.append(Start(kind, "fenced", n, fenced, fenced + 1, True, "mapped"))
    return out


def test_archive_is_read_from_the_adapters_own_lines() -> None:
    source = inspect.getsource(class_archive)
    assert all(words in source for words, _ in start.ARCHIVE_LINES)
    assert start.archive_of("The JVM mapped the class archive /c/x.jsa (it printed no") == "mapped"
    assert start.archive_of("No class archive /c/x.jsa yet: this JVM writes one when it exits") == (
        "written"
    )
    refused = "The JVM mapped the class archive?\nThe JVM did not map /c/x.jsa (Unable to use"
    assert start.archive_of(refused) == "refused"
    assert start.archive_of("nothing of it") == "none"


def test_ratios_pair_each_round_and_skip_failed_runs() -> None:
    runs = starts([(20.0, 10.0), (30.0, 12.0)])
    assert start.ratios(runs, "warm") == [0.5, 0.4]
    runs[0].ok = False  # stock's round 0 failed: that round has no ratio
    assert start.ratios(runs, "warm") == [0.4]
    assert start.ratios(runs, "cold") == []


def test_target_row_says_met_only_when_the_interval_is_under_the_target() -> None:
    assert "| yes |" in str(start.target_row(starts([(20.0, 8.0)] * 5)))
    assert "| **no** |" in str(start.target_row(starts([(20.0, 16.0)] * 5)))
    assert start.target_row(starts([(20.0, 8.0)], "cold")) is None


def test_a_run_of_other_parts_keeps_part_9_as_published() -> None:
    r = report.Results("ci", "make bench BENCH_ONLY=start", "2 cores", "2026-12-03 11:00")
    r.start = starts([(20.0, 9.0)] * 3) + starts([(60.0, 50.0)], "cold")
    text = report.markdown(r)
    assert "## 9. Time to the first node" in text
    assert "| warm | 6/6 | 20.0 | 9.0 |" in text
    kept = report.published(text, ["pairs"])
    assert kept["start"]["section"][0] == "## 9. Time to the first node"
    assert any(line.startswith("| time to the first node") for line in kept["start"]["targets"])

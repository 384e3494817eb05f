"""Part 4's pure logic: what the table says was lost or duplicated, the fence's log lines counted
per run, the refusals' causes, the report's figures, and the parts a run of some parts keeps as
docs/benchmarks.md published them when the last run's raw figures are gone."""

import dataclasses
import json
import os
import threading
import time
from types import SimpleNamespace

from dbt.adapters.events.logging import AdapterLogger

from bench import report
from bench.contention import Contention, cause, jvm_cpu
from tests.harness import contention


def test_the_counter_says_what_was_lost_and_what_stands_beyond_the_green_runs() -> None:
    assert contention.counter_settled(green=4, before=10, after=14) == (0, 0)
    assert contention.counter_settled(green=4, before=10, after=12) == (2, 0)  # lost updates
    assert contention.counter_settled(green=1, before=0, after=3) == (0, 2)  # red runs' stand


def test_a_disjoint_run_must_leave_exactly_its_own_row() -> None:
    codes = {"a": 0, "b": 0, "c": 1, "d": 1, "e": 0}
    found = {"a": [1], "c": [1], "e": [1, 1]}  # b lost; c refused yet written; e twice
    assert contention.settled_parts(codes, found) == (1, 2)
    assert contention.settled_parts({"a": 0, "d": 1}, {"a": [1]}) == (0, 0)
    assert contention.settled_parts({"a": 0}, {"a": [2]}) == (0, 1)  # applied twice


def test_stock_sends_the_fences_merge_unpinned() -> None:
    template, _, keys = contention._MODELS["counter"]
    sql = contention._statement("s.counter", template.format(t="s.counter", run="r"), keys)
    assert sql == (
        "merge into s.counter as DBT_INTERNAL_DEST using (select 0 as id, n + 1 as n from "
        "s.counter where id = 0) as DBT_INTERNAL_SOURCE on DBT_INTERNAL_SOURCE.id = "
        "DBT_INTERNAL_DEST.id when matched then update set * when not matched then insert *"
    )
    template, _, keys = contention._MODELS["batches"]
    insert = contention._statement("s.batches", "select 1", keys)
    assert insert == "insert into s.batches select * from (select 1)"


def test_the_fences_lines_are_counted_per_run() -> None:
    logger = AdapterLogger("FencedSpark")

    def run() -> None:
        logger.info("fenced merge into t: attempt 1 refused; retrying from the new version after")
        logger.info("... which conflicts with nothing; sending it again on v3 after 1.0 turns")
        logger.info("... sending it again on v4 after 0.2 turns")
        logger.info("fenced merge into t: read v2 -> committed v5")

    with contention.fence_lines() as lines:
        threads = [threading.Thread(target=run, name=n) for n in ("r0k0", "r0k1")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    after = threading.Thread(target=run, name="r0k0")  # once the block is left: not counted
    after.start()
    after.join()
    for name in ("r0k0", "r0k1"):
        assert lines[name] == {contention.SENT_AGAIN: 2, contention.RETRIED: 1}
    assert lines["r0k2"] == {}


def test_refusals_count_together_whatever_their_versions() -> None:
    delta = Exception(
        "[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] ConcurrentAppendException: Files were added to "
        "the root of the table by a concurrent update in version 12. Please try the operation "
        "again."
    )
    assert cause(delta) == "DELTA_CONCURRENT_APPEND"
    assert cause(RuntimeError("lost after 3 tries at v17")) == "lost after N tries at vN"


def _run(workload: str, mode: str, k: int, codes: list[int], seconds: float) -> Contention:
    sends = [0] * len(codes) if mode == "stock" else [1] + [0] * (len(codes) - 1)
    attempts = [1] * len(codes) if mode == "stock" else [1, 3] + [1] * (len(codes) - 2)
    errors = ["DELTA_CONCURRENT_APPEND"] * codes.count(1)
    return Contention(
        *(workload, mode, k, 20, 2, seconds, codes, attempts, sends),
        cpu_seconds=3.0 * len(codes),
        loads=[1.5, 4.0 if mode == "fenced" else 2.0],
        errors=errors,
    )


def test_cpu_time_is_read_past_the_commands_parenthesis() -> None:
    # /proc/<pid>/stat: "pid (comm) state ppid ...", utime and stime its 14th and 15th fields.
    stat = "42 (java) S 1 42 42 0 -1 4194560 10 0 0 0 250 150 0 0 20 0 90"
    fields = stat.rsplit(")", 1)[1].split()
    assert jvm_cpu(fields) == 400 / os.sysconf("SC_CLK_TCK")


def test_the_throughput_counts_only_committed_runs() -> None:
    stock = _run("row", "stock", 2, [0, 1, 1, 0], 30.0)
    assert (stock.runs, stock.committed, stock.refused, stock.per_minute) == (4, 2, 2, 4.0)
    assert not stock.exact
    fenced = _run("row", "fenced", 2, [0, 0, 0, 0], 60.0)
    assert fenced.per_minute == 4.0 and fenced.exact
    assert not dataclasses.replace(fenced, restores=1).exact
    assert not dataclasses.replace(fenced, lost=1).exact


def _results() -> report.Results:
    r = report.Results("ci", "make bench BENCH_ONLY=contention", "2 cores", "2026-12-01 22:00")
    for k in (2, 8):
        for workload in ("row", "partitions"):
            r.contention.append(_run(workload, "stock", k, [0] + [1] * (2 * k - 1), 10.0))
            r.contention.append(_run(workload, "fenced", k, [0] * 2 * k, 6.0 * k))
    return r


def test_the_report_puts_each_fenced_row_beside_stocks() -> None:
    text = report.markdown(_results())
    assert "## 4. Contention: K runs at once" in text
    # K = 8 on one row: fenced 16 in 48 s (20/min) against stock's 1 in 10 s (6/min).
    # CPU per committed run: 48 s over 16 runs against 48 s over the one stock committed.
    fenced = "| row | 8 | fenced | 16 | 16 | 48.0 | 20.0 | **3.33** | 3.0 | 0 | 0 | 0 | 0 | 1.12 |"
    stock = (
        "| row | 8 | stock | 16 | 1 | 10.0 | 6.0 |  | 48.0 | 15 | 0 | 0 | 0 | 1.00 | 1 | 0 (0) |"
    )
    assert fenced in text and stock in text
    assert "load average at the rounds' ends: stock 1.5–2.0, fenced 1.5–4.0" in text
    assert "- 36 × `DELTA_CONCURRENT_APPEND`" in text
    assert "fenced: 40/40 committed, refused 0, lost 0, duplicated 0, RESTOREs 0" in text
    assert "stock: 4/40 committed, refused 36" in text


PUBLISHED = """# Benchmarks: what the fence costs

Generated by `make bench BENCH_ONLY=pairs,nodes` on 2026-11-28 07:24 (size `ci`, 18.9 min); do not edit by hand. Runner: `bench/run.py`.

Machine: 2 cores.

Targets are reported, not asserted.

| target | measured | met |
|---|---|---|
| median fenced/stock ≤ 1.0 over Thrift, merge | 0.957 | yes |
| contention: zero lost or duplicated batches at every K | lost 0 | yes |

## 1. The same model

Measured apart: `make bench BENCH_ONLY=pairs` on 2026-11-29 01:50 (26.9 min).

Pairs, as published.

## 4. Contention: K writers, one table

Appenders, superseded.

## 8. Four models in one run

Nodes, as published.

## Where the fence's cost comes from

- **Contention.** Old appenders.
- **Spark jobs.** Jobs, as published.
"""  # noqa: E501


def test_a_run_of_some_parts_keeps_the_others_as_published() -> None:
    kept = report.published(PUBLISHED, ["contention"])
    assert set(kept) == {"pairs", "nodes"}  # not jobs: a bullet of it, but no section
    assert kept["pairs"]["section"] == [
        "## 1. The same model",
        "",
        "Measured apart: `make bench BENCH_ONLY=pairs` on 2026-11-29 01:50 (26.9 min).",
        "",
        "Pairs, as published.",
    ]
    assert kept["pairs"]["targets"] == [
        "| median fenced/stock ≤ 1.0 over Thrift, merge | 0.957 | yes |"
    ]
    # Measured by the header's run: the line says so, as `merged` would have.
    assert kept["nodes"]["section"][:3] == [
        "## 8. Four models in one run",
        "",
        "Measured apart: `make bench BENCH_ONLY=pairs,nodes` on 2026-11-28 07:24 (18.9 min).",
    ]

    r = _results()
    r.kept = kept
    text = report.markdown(r)
    assert text.index("## 1. The same model") < text.index("## 4. Contention: K runs")
    assert text.index("## 4. Contention: K runs") < text.index("## 8. Four models")
    assert "Appenders, superseded." not in text and "Old appenders" not in text
    targets = [line for line in text.splitlines() if line.startswith("| median fenced/stock")]
    assert targets and text.index(targets[0]) < text.index("| contention: every fenced run")
    assert "zero lost or duplicated batches" not in text


def test_kept_parts_survive_a_redraw_and_go_when_measured_again(tmp_path) -> None:
    r = _results()
    r.kept = report.published(PUBLISHED, ["contention"])
    path = tmp_path / "results.json"
    path.write_text(json.dumps(dataclasses.asdict(r), default=str))
    loaded = report.Results.load(str(path))
    assert loaded.kept == r.kept and loaded.contention == r.contention
    assert report.markdown(loaded) == report.markdown(r)

    again = report.Results("ci", "make bench BENCH_ONLY=pairs", "2 cores", "2026-12-02 09:00")
    out = report.merged(loaded, again, ["pairs"])
    assert set(out.kept) == {"nodes"} and out.contention == r.contention


def test_the_fences_steps_are_timed_per_run_and_only_inside() -> None:
    from bench.contention import PHASES, _phases
    from dbt.adapters.fenced_spark.fence.protocol import Fence
    from tests.harness.runner import SessionRunner

    originals = [getattr(cls, name) for cls, name in PHASES.values()]
    fence = Fence(runner=None, single_attempt=lambda: None)  # type: ignore[arg-type]
    runner = SessionRunner(SimpleNamespace(sql=lambda sql: time.sleep(0.05)))

    def run() -> None:
        fence.wait_turns(SimpleNamespace(expected_version=3), 0.0, 1.0)
        runner.execute("merge into t ...")

    with _phases() as spent:
        thread = threading.Thread(target=run, name="r1k0")
        thread.start()
        thread.join()
    runner.execute("after the block: not timed")
    assert set(spent) == {"r1k0"}
    assert 0.05 <= spent["r1k0"]["write"] < 1 and 0 <= spent["r1k0"]["back-off"] < 0.05
    assert spent["r1k0"]["verify"] == 0
    assert [getattr(cls, name) for cls, name in PHASES.values()] == originals


def test_a_fenced_runs_seconds_are_shown_by_step() -> None:
    fenced = _run("row", "fenced", 2, [0, 0], 6.0)
    assert report._phases(fenced) == "–"  # not timed (a stock run's)
    fenced.phases = {"write": [1.0, 3.0], "pre-check": [0.5, 0.5], "verify": [0.2, 0.4]}
    fenced.phases["back-off"] = [0.0, 4.0]
    assert report._phases(fenced) == "2.0 / 0.5 / 0.3 / 2.0"

"""A double-fired watermark model: the same `dbt run` started twice at the same moment, two
Spark drivers (two JVMs) on one table on HDFS with a shared metastore.

The model reads its watermark (`max(id)`) with a compile-time `run_query`, outside the write
statement, where Delta cannot see the read; then a slow pre-hook, then the append. Both runs
read the same watermark before either commits. Stock dbt-spark commits the batch twice with two
green runs; fenced_spark commits it once and refuses the other run.
"""

import re
import time

from tests.twodrivers.drivers import DbtProject, history

WATERMARK = """
{{ config(materialized='incremental', incremental_strategy='append',
          pre_hook="cache table slow_step as select reflect('java.lang.Thread', 'sleep',
                                   cast({{ var('slow_ms', 0) }} as bigint))") }}
{% set high = -1 %}
{% if execute and is_incremental() %}
  {% set high = run_query("select coalesce(max(id), -1) from " ~ this).columns[0].values()[0] %}
{% endif %}
select id, '{{ invocation_id }}' as run_id from range({{ high }} + 1, {{ high }} + 11)
"""

# The pre-hook is a CACHE TABLE because it runs at once: a bare SELECT is only planned by a
# session cursor that fetches nothing (stock's and ours), so its sleep never ran.
# Long enough to cover the two drivers' start-up skew on a loaded 2-core machine (each JVM takes
# 10-60 s to start; both start at once). Whether they overlapped is asserted, not assumed.
SLOW_MS = 20000
VB_WATERMARK = 9  # the first run's ids are 0-9
IDS = "select id, run_id from {t} order by id, run_id"


def double_fire(tmp_path, lakehouse, adapter: str):
    """The first run (one lone driver) creates ids 0-9; then two `dbt run` processes at once.
    Returns the project, vB, both runs (by exit code order), history after vB and the rows."""
    project = DbtProject(tmp_path, lakehouse, {"events.sql": WATERMARK})
    first, one, two = (project.target(f"{adapter}_{n}", adapter) for n in ("first", "a", "b"))
    project.run(first)
    table = project.table("events")

    started = time.time()
    runs = [project.start(name, {"slow_ms": SLOW_MS}) for name in (one, two)]
    try:
        codes = [run.wait() for run in runs]
    finally:
        for run in runs:
            run.kill()
    # A third driver reads the outcome; vB is the first run's last commit (before the race).
    entries, contents = lakehouse.sql([f"describe history {table}", IDS.format(t=table)])
    entries = history(entries)
    vb = max(e.version for e in entries if e.timestamp < started)
    after = [e for e in entries if e.version > vb]
    return project, vb, runs, codes, after, [(r["id"], r["run_id"]) for r in contents]


def watermark(run) -> int:
    """The watermark the run's compile-time read returned, as its compiled SQL holds it."""
    [result] = [r for r in run.results()["results"] if r["unique_id"].endswith(".events")]
    found = re.search(r"range\((-?\d+) \+ 1,", result["compiled_code"] or "")
    assert found, result["compiled_code"]
    return int(found.group(1))


def assert_overlapped(runs, commits) -> None:
    """Both runs read the table as vB left it: after any commit of the race the watermark is
    19 or more, so a run that read 9 read before the first one landed. The race happened.
    (dbt's compile timing cannot say when: a session cursor takes its snapshot when it plans
    the read, long before the fetch that ends the compile phase.)"""
    read = {run.name: watermark(run) for run in runs}
    late = {name: high for name, high in read.items() if high != VB_WATERMARK}
    assert not late, (
        f"the two runs did not overlap: {late} read a watermark written by the race's first "
        f"commit (v{min(e.version for e in commits)}), not vB's {VB_WATERMARK}; start-up skew "
        "exceeded SLOW_MS, so this run proves nothing; run it again or raise SLOW_MS"
    )


class TestStockDoubleFired:
    def test_stock_commits_the_batch_twice_with_two_green_runs(self, tmp_path, shared_lakehouse):
        project, vb, runs, codes, after, contents = double_fire(tmp_path, shared_lakehouse, "spark")
        assert codes == [0, 0], [run.output[-3000:] for run in runs]
        # Both appends landed, untagged, one after the other.
        assert [e.operation for e in after] == ["WRITE", "WRITE"], after
        assert all(e.tag is None for e in after)
        assert_overlapped(runs, after)
        # The control: the same 10 ids twice, one copy from each run.
        batches = {
            run.invocation_id: [i for i, r in contents if r == run.invocation_id] for run in runs
        }
        assert batches == {run.invocation_id: list(range(10, 20)) for run in runs}, (
            "stock dbt-spark did not duplicate the batch in this race"
        )
        assert [i for i, _ in contents].count(10) == 2


class TestFencedDoubleFired:
    def test_one_batch_committed_and_the_other_run_refused(self, tmp_path, shared_lakehouse):
        project, vb, runs, codes, after, contents = double_fire(
            tmp_path, shared_lakehouse, "fenced_spark"
        )
        assert sorted(codes) == [0, 1], [run.output[-3000:] for run in runs]
        winner, loser = sorted(runs, key=lambda run: run.process.returncode)
        ours = [e for e in after if e.tag and e.tag.get("step") == "write"]
        won = [e for e in ours if e.tag["invocation_id"] == winner.invocation_id]
        # The winner's commit landed, tagged, read at vB, right after vB.
        assert [e.version for e in won] == [vb + 1], after
        assert won[0].tag["read_version"] == vb and won[0].operation == "WRITE"
        assert_overlapped(runs, won)

        # The loser read vB too, and was refused naming the winner's commit. Whatever it wrote
        # (if it got that far) a RESTORE of its own took back.
        message = loser.message("events")
        assert f"read version (vB): {vb}" in message, message
        assert f"v{vb + 1} WRITE" in message and "refused" in message, message
        lost = [e for e in ours if e.tag["invocation_id"] == loser.invocation_id]
        restores = [e for e in after if e.operation == "RESTORE"]
        if lost:
            assert len(restores) == 1 and restores[0].version == lost[-1].version + 1, after
            assert "then reverted by RESTORE" in message, message
        else:
            assert not restores and len(after) == 1, after
            assert "never written" in message, message
        assert "refused" in loser.output

        # Exactly one batch: ids 0-19 once each, 10-19 from the winner alone.
        assert [i for i, _ in contents] == list(range(20))
        assert {r for i, r in contents if i >= 10} == {winner.invocation_id}

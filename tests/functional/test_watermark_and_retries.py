"""The watermark append against stock dbt-spark, fence_retries, and eight writers at once."""

import json
import threading
import time
from collections import Counter
from contextlib import nullcontext

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.fence.errors import FenceViolation
from dbt.adapters.fenced_spark.fence.protocol import Fence, FenceState
from dbt.adapters.fenced_spark.fence_sql import FenceSql
from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import (
    ForeignAt,
    ForeignWriter,
    history,
    long_spark_job,
    max_concurrent,
    ours,
    rows,
    without_leading_comments,
)
from tests.harness.runner import SessionRunner

WATERMARK = """
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append'),
          fence_retries=var('retries', 0)) }}
select id from range(0, {{ var('hi', 3) }}, 1, 1) where true
{% if var('slow_ms', 0) | int > 0 %}
and reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) is not null
{% endif %}
{% if is_incremental() %}
and id > (select coalesce(max(id), -1) from {{ this }})
{% endif %}
"""

INSERT_OVERWRITE = """
{{ config(materialized='incremental', incremental_strategy='insert_overwrite', partition_by='d') }}
select id, cast(id % 2 as int) as d, {{ var('round', 0) }} as round from range(0, 4)
"""


def race_during_write(spark, table, run):
    """A double-fired job appends the same new rows while our slowed append runs."""
    writer = ForeignWriter(spark)
    writer.when(long_spark_job(spark, 1.0), f"insert into {table} values (3), (4)")
    results = run()
    writer.join()
    return results


class WatermarkBase:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": WATERMARK}

    def start(self, project):
        run_dbt(["run", "--full-refresh"])
        return f"{project.test_schema}.events"

    def raced_run(self, project, spark):
        """The slowed append under the double-fired job; proves the foreign commit landed."""
        table = self.start(project)
        vb = history(spark, table)[-1].version
        results = race_during_write(
            spark,
            table,
            lambda: run_dbt(
                ["run", "--vars", json.dumps({"hi": 5, "slow_ms": 4000})], expect_pass=False
            ),
        )
        after = [e for e in history(spark, table) if e.version > vb]
        assert after[0].operation == "WRITE" and after[0].tag is None
        return table, after, results.results[0].message


class TestStockWatermarkUnderTheSameRace(StockSparkProfile, WatermarkBase):
    """The control. With the watermark inside the INSERT, Delta 4.4 registers the self-read,
    so stock dbt-spark is refused too: by Delta's bare ConcurrentAppendException ("please
    retry"), with no word on what landed. Stock can only duplicate when the watermark is read
    outside the write statement (a compile-time run_query; see docs/limits.md)."""

    def test_stock_append_is_refused_by_delta_without_explanation(self, project, spark):
        table, after, message = self.raced_run(project, spark)
        assert [e.operation for e in after] == ["WRITE"]
        assert "ConcurrentAppendException" in message and "Please retry" in message
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]


class TestFencedWatermark(WatermarkBase):
    def test_fenced_append_refuses_then_rerun_is_exact(self, project, spark):
        """The watermark is pinned to vB, a read Delta does not see: Delta commits ours above
        the job's, and verification finds the job's rows among those the model read."""
        table, after, message = self.raced_run(project, spark)
        theirs, mine, restore = after
        assert [e.operation for e in after] == ["WRITE", "WRITE", "RESTORE"]
        assert ours(after) == [mine] and ours(after, "revert") == [restore]
        assert restore.read_version == mine.version  # the RESTORE undid ours, not theirs
        assert f"v{theirs.version} WRITE" in message and "rows this model read" in message
        assert (
            f"written as v{mine.version}, then reverted by RESTORE (v{restore.version})" in message
        )
        assert "Please retry" not in message
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]

        run_dbt(["run", "--vars", json.dumps({"hi": 6})])
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(6)]

    def test_fence_retries_recompute_from_the_new_version(self, project, spark, monkeypatch):
        table = self.start(project)
        vb = history(spark, table)[-1].version
        writer = ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (3)")
        results = run_dbt(["run", "--vars", json.dumps({"hi": 5, "retries": 3})])
        assert writer.fired == 1

        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE", "WRITE"]
        foreign, mine = after
        assert foreign.tag is None  # the race fired once, right after the first vB
        assert mine.tag["attempt"] == 2 and mine.tag["read_version"] == foreign.version
        assert len(ours(after)) == 1
        assert results.results[0].adapter_response["read_version"] == foreign.version
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]

    def test_each_retry_pins_the_model_sql_anew(self, project, spark, monkeypatch):
        """Two refusals in a row: the third attempt's write reads the table at the version
        the second refusal left, not at an earlier attempt's (the model SQL is the write's
        own source, pinned anew in it at each retry)."""
        table = self.start(project)
        vb = history(spark, table)[-1].version
        writer = ForeignWriter(spark)
        theirs = [f"insert into {table} values (3)", f"insert into {table} values (10)"]
        execute = FenceSql.execute

        def raced(runner, sql):
            # right before our INSERT takes its snapshot
            if theirs and without_leading_comments(sql).lower().startswith("insert into"):
                writer.sql(theirs.pop(0))
            execute(runner, sql)

        monkeypatch.setattr(FenceSql, "execute", raced)
        results = run_dbt(["run", "--vars", json.dumps({"hi": 12, "retries": 3})])

        after = [e for e in history(spark, table) if e.version > vb]
        # each foreign INSERT landed right before ours, which Delta committed above it; the
        # fence found it among the rows the model read and reverted ours, then retried
        assert [(e.operation, e.tag and (e.tag["attempt"], e.tag["step"])) for e in after] == [
            ("WRITE", None),
            ("WRITE", (1, "write")),
            ("RESTORE", (1, "revert")),
            ("WRITE", None),
            ("WRITE", (2, "write")),
            ("RESTORE", (2, "revert")),
            ("WRITE", (3, "write")),
        ]
        second_vb = after[2].version  # the first RESTORE: what attempt 2 read
        assert after[4].tag["read_version"] == second_vb
        mine = after[-1]
        assert mine.tag["read_version"] == after[5].version == mine.read_version
        assert results.results[0].adapter_response["read_version"] == mine.read_version
        # pinned at attempt 1's vB it would have added 3..11, at attempt 2's 4..11
        assert rows(spark, f"select id from {table} order by id") == [
            (0,),
            (1,),
            (2,),
            (3,),
            (10,),
            (11,),
        ]


class TestEightConcurrentAppends:
    """Eight writers, one table, fence_retries 8, all in one JVM with their own sessions.

    Fenced writers refuse each other inside Delta (fence/delta/sequence.py): a writer whose
    pre-check another's commit overtook is skipped or refused by Delta with nothing written, and
    retried. So every writer commits strictly (its commit read the version right before it),
    every batch is there exactly once, and no RESTORE is ever needed.
    """

    @pytest.fixture(scope="class")
    def models(self):
        return {"landing.sql": "{{ config(materialized='table') }} select 0 as batch, 0 as id"}

    def test_every_batch_lands_exactly_once_with_no_restore(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.landing"
        results, refusals, crashes, spans, first_vb = {}, {}, [], {}, {}

        def writer(batch: int) -> None:
            started = time.monotonic()
            session = spark.newSession()
            fence = Fence(SessionRunner(session), nullcontext)
            session.sql(
                f"create temporary view batch_{batch} as "
                f"select {batch} as batch, id from range({batch * 100}, {batch * 100 + 10})"
            )
            latest = first_vb[batch] = fence.latest_version(table)
            state = FenceState(
                table, table, "append_if_unchanged", latest, latest, "inv-8", f"writer{batch}"
            )
            try:
                sql = f"insert into {table} select * from batch_{batch}"
                results[batch] = fence.run(state, sql, retries=8)
            except FenceViolation as refused:
                refusals[batch] = refused.report
            except Exception as exc:
                crashes.append(exc)
            spans[batch] = (started, time.monotonic())

        threads = [threading.Thread(target=writer, args=(b,)) for b in range(1, 9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)

        assert crashes == []
        landed = [(e.version, e.read_version, e.operation, e.tag) for e in history(spark, table)]
        said = {b: r.message() for b, r in refusals.items()}
        assert refusals == {}, said
        counts = dict(rows(spark, f"select batch, count(*) from {table} group by batch"))
        assert counts == {0: 1, **{b: 10 for b in range(1, 9)}}, landed
        assert "RESTORE" not in {e.operation for e in history(spark, table)}, landed
        commits = {e.tag["node"]: e for e in ours(history(spark, table))}
        assert sorted(commits) == sorted(f"writer{b}" for b in range(1, 9))
        for batch, result in results.items():
            commit = commits[f"writer{batch}"]
            assert result.commit_version == commit.version
            assert commit.read_version == commit.version - 1  # strict: nothing in between
        # They raced: writers ran at once, two or more started from the same vB (only one
        # could commit on it), and the others had to retry.
        assert max_concurrent(spans.values()) >= 2, spans
        assert max(Counter(first_vb.values()).values()) >= 2, first_vb
        retried = [c for c in commits.values() if c.tag["attempt"] > 1]
        assert retried
        print(
            f"committed strictly: {len(results)}, retried: {len(retried)}, "
            f"most at once: {max_concurrent(spans.values())}"
        )


class TestInsertOverwriteStaysUnfenced:
    @pytest.fixture(scope="class")
    def models(self):
        return {"parts.sql": INSERT_OVERWRITE}

    def test_runs_as_dbt_spark_does_and_carries_no_tag(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.parts"
        run_dbt(["run", "--vars", json.dumps({"round": 1})])
        last = history(spark, table)[-1]
        assert last.operation == "WRITE" and last.tag is None
        assert rows(spark, f"select distinct round from {table}") == [(1,)]

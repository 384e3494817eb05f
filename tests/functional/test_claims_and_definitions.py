"""Found by the hostile review of 2026-12-03 (issues 59 and 60): each race lands from another
session at a named moment of the run (`ForeignAt`) and is proved from DESCRIBE HISTORY.

- a foreign rewrite marked `dataChange: false` by a writer whose session records no operation
  metrics (`spark.databricks.delta.history.metricsEnabled=false`): the counter's foreign +10;
- time-dependent model SQL (`current_timestamp()`): the headline race with the clock, not
  the source, moving between the pre-check and the MERGE;
- a foreign CREATE OR REPLACE, ADD COLUMN, DROP COLUMN and type widening under column
  mapping, right after vB.
"""

import json
import time

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.fenced_spark.fence.protocol import Fence
from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, ForeignWriter, commit_actions, history, ours, rows

# The textbook lost update: reads the counter from {{ this }} and writes it + 1.
COUNTER = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          tblproperties=var('props', none)) }}
{% if is_incremental() %}
select 0 as id, n + 1 as n from {{ this }} where id = 0
{% else %}
select 0 as id, 0 as n
{% endif %}
"""


def _after(spark, table, vb):
    return [e for e in history(spark, table) if e.version > vb]


def _ops(entries):
    return [(e.version, e.operation, e.tag and e.tag.get("step")) for e in entries]


class TestNoDataChangeClaim:
    @pytest.fixture(scope="class")
    def models(self):
        return {"counter.sql": COUNTER}

    def race(self, project, spark, monkeypatch, metrics: bool):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.counter"
        vb = history(spark, table)[-1].version
        statements = [] if metrics else ["set spark.databricks.delta.history.metricsEnabled=false"]
        # A job that adds 10 to the counter and says its rewrite changes no data.
        statements.append(
            f"insert overwrite {table} with ('dataChange' = 'false') "
            f"select id, n + 10 as n from {table}"
        )
        at = ForeignAt(monkeypatch, spark, "vb", statements)
        # Refused either way: with metrics its counts contradict the claim, without them
        # nothing in its log can confirm it, so its rows are read.
        results, output = run_dbt_and_capture(["run"], expect_pass=False)
        assert at.fired == 1
        after = _after(spark, table, vb)
        assert after[0].version == vb + 1 and after[0].tag is None and after[0].operation == "WRITE"
        kinds = {(k, b.get("dataChange")) for k, b in commit_actions(spark, table, vb + 1)}
        assert ("add", False) in kinds and ("remove", False) in kinds, kinds
        return table, vb, after, results, output

    def test_with_metrics_the_claim_is_doubted_and_refused(self, project, spark, monkeypatch):
        # The control: Delta records numOutputRows, which the fence holds against the claim.
        table, vb, after, results, _ = self.race(project, spark, monkeypatch, True)
        assert [e.operation for e in after] == ["WRITE"], _ops(after)
        assert rows(spark, f"select n from {table}") == [(10,)]
        assert "never written" in results.results[0].message

    def test_without_metrics_the_claim_is_checked_on_its_rows_and_refused(
        self, project, spark, monkeypatch
    ):
        # The same commit from a session that records no metrics: its removes carry no row
        # counts either, so nothing in its log can confirm `dataChange: false`. The foreign +10
        # changed the very row the model reads and writes: committing over it would lose it.
        table, vb, after, results, _ = self.race(project, spark, monkeypatch, False)
        assert [e.operation for e in after] == ["WRITE"], _ops(after)
        assert rows(spark, f"select n from {table}") == [(10,)]
        message = results.results[0].message
        assert "never written" in message
        assert (
            f"v{vb + 1} WRITE: marked no data change by its writer, yet its log counts none of "
            "the rows of the files it removed: changed rows" in message
        ), message


# The counter in a partitioned table, beside a row of another partition.
PARTITIONED_COUNTER = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          partition_by=['p']) }}
{% if is_incremental() %}
select 0 as id, n + 1 as n, 'a' as p from {{ this }} where id = 0
{% else %}
select 0 as id, 0 as n, 'a' as p union all select 1 as id, 100 as n, 'b' as p
{% endif %}
"""


class TestNoDataChangeClaimOnAPartition:
    """The hostile review over Thrift and Connect (2026-12-03): a partition rewritten with
    `dataChange: false` from a session without metrics writes its removes with row counts, as
    many as it adds, so the counts agreed and the claim stood: the foreign +10 was lost, and
    the log said "marked no data change by its writer"."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"counter.sql": PARTITIONED_COUNTER}

    @pytest.mark.parametrize(
        "rewrite",
        [
            "insert overwrite {t} with ('dataChange' = 'false') partition (p = 'a') "
            "select id, n + 10 from {t} where p = 'a'",
            "insert into {t} with ('dataChange' = 'false') replace where p = 'a' "
            "select id, n + 10, p from {t} where p = 'a'",
        ],
        ids=["static_partition", "replace_where"],
    )
    def test_refused_with_a_true_reason(self, project, spark, monkeypatch, rewrite):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.counter"
        vb = history(spark, table)[-1].version
        statements = ["set spark.databricks.delta.history.metricsEnabled=false"]
        at = ForeignAt(monkeypatch, spark, "vb", [*statements, rewrite.format(t=table)])
        results, _ = run_dbt_and_capture(["run"], expect_pass=False)
        assert at.fired == 1
        after = _after(spark, table, vb)
        assert [e.operation for e in after] == ["WRITE"] and after[0].tag is None, _ops(after)
        actions = commit_actions(spark, table, vb + 1)
        info = next(b for k, b in actions if k == "commitInfo")
        assert not info.get("operationMetrics"), info  # the writer recorded no metrics
        counts = {
            k: json.loads(b["stats"])["numRecords"] for k, b in actions if k in ("add", "remove")
        }
        assert counts == {"add": 1, "remove": 1}, counts  # the counts agree
        assert all(b["dataChange"] is False for k, b in actions if k in ("add", "remove"))
        assert rows(spark, f"select id, n from {table} order by id") == [(0, 10), (1, 100)]
        message = results.results[0].message
        assert "never written" in message
        assert (
            f"v{vb + 1} WRITE: marked no data change by its writer, yet its writer recorded no "
            "metrics, and row counts alone do not show its rows unchanged: changed rows in "
            "partition p=a" in message
        ), message


# Orders due by now, from an upstream table: the model never reads {{ this }}; what it writes
# depends on when it is evaluated.
DUE = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          partition_by=['p']) }}
select id, v, p from {{ target.schema }}.src where due <= current_timestamp()
"""


class TestTimeDependentModel:
    @pytest.fixture(scope="class")
    def models(self):
        return {"orders.sql": DUE}

    def test_an_order_falling_due_after_the_precheck_is_refused(self, project, spark, monkeypatch):
        src, table = f"{project.test_schema}.src", f"{project.test_schema}.orders"
        writer = ForeignWriter(spark)
        writer.sql(
            f"create or replace table {src} (id int, v string, p string, due timestamp) using delta"
        )
        writer.sql(
            f"insert into {src} values (1, 'open', 'a', timestamp'2020-01-01'), "
            "(2, 'open', 'a', timestamp'2020-01-01'), (5, 'shipped', 'a', timestamp'2999-01-01')"
        )
        run_dbt(["run", "--full-refresh"])
        writer.sql(f"insert into {table} values (5, 'open', 'a')")
        vb = history(spark, table)[-1].version
        at = ForeignAt(monkeypatch, spark, "vb", f"update {table} set v = 'cancelled' where id = 5")
        original, due = Fence.precheck, []

        def precheck(fence, state):
            if not due and state.strategy == "merge":
                # Order 5 falls due 3 s from now: after the pre-check's prediction, before the
                # MERGE evaluates the model again (the source itself no longer moves).
                due.append(time.time() + 3)
                writer.sql(
                    f"update {src} set due = current_timestamp() + interval 3 seconds where id = 5"
                )
                judged = original(fence, state)
                time.sleep(max(0.0, due[0] + 1 - time.time()))
                return judged
            return original(fence, state)

        monkeypatch.setattr(Fence, "precheck", precheck)
        results, output = run_dbt_and_capture(["run"], expect_pass=False)
        after = _after(spark, table, vb)
        assert at.fired == 1 and due, _ops(after)
        assert rows(spark, f"select v from {table} where id = 5") == [("cancelled",)], _ops(after)
        message = results.results[0].message
        assert f"v{vb + 1} UPDATE" in message, message
        assert "outside what this model read or writes" not in output


class TestForeignDefinitionChanges:
    @pytest.fixture(scope="class")
    def models(self):
        return {"counter.sql": COUNTER}

    @pytest.mark.parametrize(
        "foreign,what",
        [
            ("create or replace table {t} using delta as select 0 as id, 100 as n", "replace"),
            ("alter table {t} add column x string", "add"),
            ("alter table {t} drop column x", "drop"),
            ("alter table {t} alter column n type bigint", "widen"),
        ],
    )
    def test_refused_with_a_true_reason(self, project, spark, monkeypatch, foreign, what):
        props = {"delta.columnMapping.mode": "name", "delta.enableTypeWidening": "true"}
        mapped = json.dumps({"props": props})
        run_dbt(["run", "--full-refresh", "--vars", mapped])
        table = f"{project.test_schema}.counter"
        if what == "drop":
            ForeignWriter(spark).sql(f"alter table {table} add column x string")
        vb = history(spark, table)[-1].version
        at = ForeignAt(monkeypatch, spark, "vb", foreign.format(t=table))
        results, output = run_dbt_and_capture(["run", "--vars", mapped], expect_pass=False)
        after = _after(spark, table, vb)
        assert at.fired == 1 and after[0].tag is None, _ops(after)
        assert not ours(after), _ops(after)  # nothing of ours committed
        message = results.results[0].message
        print("MESSAGE", what, message)
        assert "never written" in message and f"v{vb + 1}" in message, message
        assert "changed the table itself" in message, message


# Spark 4.1's temporal clause is `[FOR] (SYSTEM_VERSION | VERSION) AS OF v` or `[FOR]
# (SYSTEM_TIME | TIMESTAMP) AS OF t`; docs/fence.md: "A reference that already has VERSION AS
# OF or TIMESTAMP AS OF is left alone."
TIME_TRAVELLED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if is_incremental() %}
select 0 as id, (select max(n) from {{ this }} system_version as of 0) + 100 as n
{% else %}
select 0 as id, 0 as n
{% endif %}
"""


class TestAnExplicitSystemVersionIsLeftAlone:
    @pytest.fixture(scope="class")
    def models(self):
        return {"travelled.sql": TIME_TRAVELLED}

    def test_the_run_succeeds_as_on_stock(self, project, spark):
        run_dbt(["run", "--full-refresh"])
        results, output = run_dbt_and_capture(["run"], expect_pass=None)
        table = f"{project.test_schema}.travelled"
        print("STATUS", results.results[0].status, results.results[0].message)
        assert str(results.results[0].status) == "success", results.results[0].message
        assert rows(spark, f"select n from {table}") == [(100,)]


class TestStockRunsTheSystemVersionRead(StockSparkProfile, TestAnExplicitSystemVersionIsLeftAlone):
    """The control: stock dbt-spark runs the same model."""

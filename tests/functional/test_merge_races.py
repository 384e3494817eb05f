"""The merge race matrix on real Spark + Delta, and the stock dbt-spark control.

The model upserts a batch of orders. A foreign writer (its own SparkSession) sets order 1
to 'cancelled' at three moments. Each test first proves from DESCRIBE HISTORY that the
foreign commit landed where intended, then judges the outcome from contents and history.
"""

import json

from dbt.tests.util import run_dbt

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import (
    ForeignAt,
    ForeignWriter,
    OrdersTable,
    commit_actions,
    history,
    long_spark_job,
    ours,
    response_of,
    rows,
)

# The sleep is joined on its result: an unused column would be pruned by the optimizer, and
# the MERGE would not be slowed at all (seen once in CI).
ORDERS = """
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='id',
    fenced=var('fenced', true),
) }}
select id, status, amount
from values {{ var('batch', "(1, 'open', 10), (2, 'open', 20), (3, 'open', 30)") }}
  as batch(id, status, amount)
{% if var('empty', false) %} where false {% endif %}
{% if var('slow_ms', 0) | int > 0 %}
join (
  select reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) as z
) slow on slow.z is not null
{% endif %}
"""

SHIP_1_AND_ADD_4 = "(1, 'shipped', 11), (4, 'open', 40)"
# The table after a refused run: the foreign cancel, and nothing of the batch.
ONLY_THE_CANCEL = [(1, "cancelled", 10), (2, "open", 20), (3, "open", 30)]


def dbt_vars(**values) -> list:
    return ["--vars", json.dumps(values)]


def invocation_id(project) -> str:
    with open(f"{project.project_root}/target/run_results.json") as f:
        return json.load(f)["metadata"]["invocation_id"]


class MergeRaceBase(OrdersTable):
    ORDERS = ORDERS

    def cancel_order_1(self, table: str) -> str:
        return f"update {table} set status = 'cancelled' where id = 1"


class TestFencedMerge(MergeRaceBase):
    def test_first_run_creates_second_run_merges(self, project, spark, table):
        vb = history(spark, table)[-1].version
        results = run_dbt(["run", *dbt_vars(batch=SHIP_1_AND_ADD_4)])
        response = results.results[0].adapter_response
        assert response["read_version"] == vb
        assert response["commit_version"] == vb + 1
        assert response["fence_outcome"] == "committed"
        assert response_of(project, "orders") == response
        assert rows(spark, f"select * from {table} order by id") == [
            (1, "shipped", 11),
            (2, "open", 20),
            (3, "open", 30),
            (4, "open", 40),
        ]
        last = history(spark, table)[-1]
        assert last.operation == "MERGE" and last.read_version == vb
        assert last.tag["node"] == "model.test.orders"
        assert last.tag["strategy"] == "merge" and last.tag["read_version"] == vb
        assert last.tag["invocation_id"] == invocation_id(project)

    def test_empty_batch_commits_only_the_fences_sequence(self, project, spark, table):
        # The fenced write carries a SetTransaction (fence/delta/sequence.py), and Delta commits it
        # even when the MERGE changed no row: the commit holds no file.
        before = history(spark, table)
        content = rows(spark, f"select * from {table} order by id")
        results = run_dbt(["run", *dbt_vars(empty=True)])
        response = results.results[0].adapter_response
        assert response["fence_outcome"] == "committed"
        assert response_of(project, "orders") == response  # as run_results.json holds it
        vb = before[-1].version
        assert response["read_version"] == vb and response["commit_version"] == vb + 1
        after = history(spark, table)
        assert after[:-1] == before
        ours = after[-1]
        assert ours.operation == "MERGE" and ours.read_version == vb and ours.tag["node"]
        # only the SetTransaction: no file added or removed
        assert [k for k, _ in commit_actions(spark, table, ours.version)] == ["commitInfo", "txn"]
        assert rows(spark, f"select * from {table} order by id") == content

    def test_race_a_foreign_commit_before_vb_is_built_upon(self, project, spark, table):
        writer = ForeignWriter(spark)
        writer.sql(self.cancel_order_1(table))
        foreign = history(spark, table)[-1]
        assert foreign.operation == "UPDATE" and foreign.tag is None  # the race fired

        results = run_dbt(["run", *dbt_vars(batch="(2, 'shipped', 21)")])

        after = history(spark, table)
        assert results.results[0].adapter_response["read_version"] == foreign.version
        merge = after[-1]
        assert merge.operation == "MERGE" and merge.read_version == foreign.version
        assert rows(spark, f"select * from {table} order by id") == [
            (1, "cancelled", 10),
            (2, "shipped", 21),
            (3, "open", 30),
        ]  # both changes kept

    def test_race_b_foreign_commit_after_vb_fails_the_run(self, project, spark, monkeypatch, table):
        vb = history(spark, table)[-1].version
        ForeignAt(monkeypatch, spark, "vb", self.cancel_order_1(table))
        results = run_dbt(["run", *dbt_vars(batch=SHIP_1_AND_ADD_4)], expect_pass=False)
        after = history(spark, table)
        foreign = [e for e in after if e.version > vb]
        assert [e.operation for e in foreign] == ["UPDATE"]  # landed after vB, before the write
        assert foreign[0].version == vb + 1 and foreign[0].tag is None

        message = results.results[0].message
        assert "refused" in message and f"version {vb}" in message
        assert f"v{vb + 1} UPDATE" in message and "never written" in message
        assert "fence_retries" in message
        assert ours([e for e in after if e.version > vb]) == []
        assert rows(spark, f"select * from {table} order by id") == ONLY_THE_CANCEL

    def test_race_c_foreign_commit_during_merge_is_refused(self, project, spark, table):
        vb = history(spark, table)[-1].version
        writer = ForeignWriter(spark)
        writer.when(long_spark_job(spark, 1.0), self.cancel_order_1(table))
        results = run_dbt(
            ["run", *dbt_vars(batch=SHIP_1_AND_ADD_4, slow_ms=6000)], expect_pass=False
        )
        writer.join()

        after = history(spark, table)
        foreign = [e for e in after if e.version > vb]
        assert [e.operation for e in foreign] == ["UPDATE"] and foreign[0].tag is None
        message = results.results[0].message
        assert "conflict detection during the write" in message  # Delta saw it mid-MERGE
        assert "never written" in message
        assert rows(spark, f"select * from {table} order by id") == ONLY_THE_CANCEL

    def test_fenced_false_gives_stock_behaviour(self, project, spark, monkeypatch, table):
        vb = history(spark, table)[-1].version
        # No vB to race after: the foreign commit lands as the materialization starts.
        ForeignAt(monkeypatch, spark, "compiled", self.cancel_order_1(table))
        run_dbt(["run", *dbt_vars(batch=SHIP_1_AND_ADD_4, fenced=False)])
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE", "MERGE"]
        assert ours(after) == []  # stock writes carry no fence tag
        assert rows(spark, f"select status from {table} where id = 1") == [("shipped",)]


class TestStockSparkLosesTheUpdate(StockSparkProfile, MergeRaceBase):
    """The control: the same race (b) against stock dbt-spark succeeds and loses the update."""

    def test_race_b_stock_dbt_spark_silently_overwrites(self, project, spark, monkeypatch, table):
        vb = history(spark, table)[-1].version
        ForeignAt(monkeypatch, spark, "compiled", self.cancel_order_1(table))
        run_dbt(["run", *dbt_vars(batch=SHIP_1_AND_ADD_4)])
        after = history(spark, table)
        assert [e.operation for e in after if e.version > vb] == ["UPDATE", "MERGE"]
        assert rows(spark, f"select status from {table} where id = 1") == [("shipped",)]

"""The `insert` strategy: the model's rows whose key is not in the table yet, never touching a
row that is. Fenced as merge is (Delta's conflict detection during the MERGE, plus the vB
check). The foreign writer is another loader (its own session or Thrift client) inserting key
4 at three moments, proven from DESCRIBE HISTORY; stock dbt-spark doing the same job is the
control."""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, ForeignWriter, history, long_spark_job, rows

EVENTS = """
{{ config(
    materialized='incremental',
    incremental_strategy=var('strategy', 'insert'),
    unique_key='id',
) }}
select id, payload
from values {{ var('batch', "(1, 'a'), (2, 'b'), (3, 'c')") }} as batch(id, payload)
{% if var('slow_ms', 0) | int > 0 %}
join (
  select reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms') }} as bigint)) as z
) slow on slow.z is not null
{% endif %}
{% if is_incremental() and var('strategy', 'insert') == 'append' %}
where id not in (select id from {{ this }})
{% endif %}
"""

# The batch repeats key 1 with a new payload (insert never updates it) and brings 4 and 5.
BATCH = "(1, 'a2'), (4, 'ours'), (5, 'ours')"
THEIRS = "insert into {t} values (4, 'theirs')"
UNTOUCHED = [(1, "a"), (2, "b"), (3, "c"), (4, "theirs")]
CONVERGED = [(1, "a"), (2, "b"), (3, "c"), (4, "theirs"), (5, "ours")]
TABLE = "select id, payload from {t} order by id, payload"


class InsertRace:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": EVENTS}

    def start(self, project, spark, strategy="insert"):
        run_dbt(["run", "--full-refresh", "--vars", json.dumps({"strategy": strategy})])
        table = f"{project.test_schema}.events"
        return table, history(spark, table)[-1].version

    def race(self, project, spark, monkeypatch, timing, expect_pass, strategy="insert"):
        table, vb = self.start(project, spark, strategy)
        dbt_vars = {"batch": BATCH, "strategy": strategy}
        if timing == "during":
            writer = ForeignWriter(spark)
            writer.when(long_spark_job(spark, 1.0), THEIRS.format(t=table))
            dbt_vars["slow_ms"] = 5000
        elif timing == "before":
            writer = ForeignWriter(spark)
            writer.sql(THEIRS.format(t=table))
        else:
            writer = ForeignAt(monkeypatch, spark, "vb", THEIRS.format(t=table))
        results = run_dbt(["run", "--vars", json.dumps(dbt_vars)], expect_pass=expect_pass)
        if timing == "during":
            writer.join()
        monkeypatch.undo()
        after = [e for e in history(spark, table) if e.version > vb]
        theirs = [e for e in after if e.tag is None and e.operation == "WRITE"]
        assert len(theirs) == 1 and theirs[0].version == vb + 1  # landed where intended
        return table, vb, after, results


class TestFencedInsert(InsertRace):
    def test_inserts_only_new_keys_and_reports(self, project, spark):
        table, vb = self.start(project, spark)
        results, output = run_dbt_and_capture(["run", "--vars", json.dumps({"batch": BATCH})])
        commit = history(spark, table)[-1]
        assert commit.operation == "MERGE" and commit.read_version == vb
        assert commit.tag["strategy"] == "insert" and commit.tag["read_version"] == vb
        assert f"fenced insert into {table}: read v{vb} -> committed v{vb + 1}" in output
        assert results.results[0].adapter_response["fence_outcome"] == "committed"
        assert rows(spark, TABLE.format(t=table)) == [
            (1, "a"),
            (2, "b"),
            (3, "c"),
            (4, "ours"),
            (5, "ours"),
        ]
        # Nothing new: a MERGE that changes nothing makes no commit.
        run_dbt(["run", "--vars", json.dumps({"batch": BATCH})])
        assert history(spark, table)[-1].version == vb + 1

    def test_before_vb_their_key_is_kept(self, project, spark, monkeypatch):
        table, vb, after, _ = self.race(project, spark, monkeypatch, "before", True)
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        assert after[1].tag["read_version"] == vb + 1
        assert rows(spark, TABLE.format(t=table)) == CONVERGED

    @pytest.mark.parametrize("timing", ["between", "during"])
    def test_refused_nothing_written_and_a_rerun_converges(
        self, project, spark, monkeypatch, timing
    ):
        table, vb, after, results = self.race(project, spark, monkeypatch, timing, False)
        assert [e.operation for e in after] == ["WRITE"]  # nothing of ours landed
        message = results.results[0].message
        assert f"fenced insert into {table}" in message.lower()
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} WRITE" in message
        assert "never written: the table is as the other writer(s) left it." in message
        if timing == "during":
            assert "Delta's conflict detection during the write" in message
        assert rows(spark, TABLE.format(t=table)) == UNTOUCHED

        run_dbt(["run", "--vars", json.dumps({"batch": BATCH})])
        assert rows(spark, TABLE.format(t=table)) == CONVERGED


class TestStockSameJob(StockSparkProfile, InsertRace):
    """The control: stock dbt-spark doing the same job, as a merge on the key or as an append
    that skips keys it already has."""

    @pytest.mark.parametrize("strategy", ["merge", "append"])
    def test_during_fails_with_deltas_raw_error(self, project, spark, monkeypatch, strategy):
        table, vb, after, results = self.race(
            project, spark, monkeypatch, "during", False, strategy=strategy
        )
        message = results.results[0].message
        assert "DELTA_CONCURRENT_APPEND" in message and "Please retry the operation" in message
        assert [e.operation for e in after] == ["WRITE"]
        assert rows(spark, TABLE.format(t=table)) == UNTOUCHED

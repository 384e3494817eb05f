"""The `insert` strategy: the model's rows whose key is not in the table yet, never touching a
row that is. Fenced as merge is (Delta's conflict detection during the MERGE, plus the vB
check). The foreign writer is another loader (its own session or Thrift client) inserting key
4 at three moments, proven from DESCRIBE HISTORY: its row is kept and the batch's key 4 never
inserted over it, the serial result (the foreign insert first); one that updates a key of the
batch is refused. Stock dbt-spark doing the same job is the control."""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import (
    ForeignAt,
    ForeignWriter,
    commit_actions,
    history,
    long_spark_job,
    rows,
)

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
UPDATED = "update {t} set payload = 'theirs' where id = 1"
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

    def race(
        self, project, spark, monkeypatch, timing, expect_pass, strategy="insert", foreign=THEIRS
    ):
        table, vb = self.start(project, spark, strategy)
        dbt_vars = {"batch": BATCH, "strategy": strategy}
        if timing == "during":
            writer = ForeignWriter(spark)
            writer.when(long_spark_job(spark, 1.0), foreign.format(t=table))
            dbt_vars["slow_ms"] = 5000
        elif timing == "before":
            writer = ForeignWriter(spark)
            writer.sql(foreign.format(t=table))
        else:
            writer = ForeignAt(monkeypatch, spark, "vb", foreign.format(t=table))
        args = ["run", "--vars", json.dumps(dbt_vars)]
        results, output = run_dbt_and_capture(args, expect_pass=expect_pass)
        if timing == "during":
            writer.join()
        monkeypatch.undo()
        after = [e for e in history(spark, table) if e.version > vb]
        operation = "WRITE" if foreign == THEIRS else "UPDATE"
        theirs = [e for e in after if e.tag is None and e.operation == operation]
        assert len(theirs) == 1 and theirs[0].version == vb + 1  # landed where intended
        return table, vb, after, results, output


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
        # Nothing new: a MERGE that changes nothing commits only its SetTransaction.
        run_dbt(["run", "--vars", json.dumps({"batch": BATCH})])
        again = history(spark, table)[-1]
        assert again.version == vb + 2 and again.tag["read_version"] == vb + 1
        assert [k for k, _ in commit_actions(spark, table, again.version)] == ["commitInfo", "txn"]

    def test_before_vb_their_key_is_kept(self, project, spark, monkeypatch):
        table, vb, after, _, _ = self.race(project, spark, monkeypatch, "before", True)
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        assert after[1].tag["read_version"] == vb + 1
        assert rows(spark, TABLE.format(t=table)) == CONVERGED

    @pytest.mark.parametrize("timing", ["between", "during"])
    def test_after_vb_their_key_is_kept(self, project, spark, monkeypatch, timing):
        # Their insert changed no row and none this model read: its MERGE, at a snapshot
        # that holds their key 4, inserts only 5, the serial result (was refused).
        table, vb, after, results, output = self.race(project, spark, monkeypatch, timing, True)
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        merge = after[1]
        assert merge.tag["read_version"] == vb and merge.read_version == vb + 1
        assert merge.tag["tolerated"] == [vb + 1]
        [reason] = results.results[0].adapter_response["tolerated"]
        assert reason.startswith(f"v{vb + 1} WRITE: only inserted rows, none this model read")
        if timing == "during":
            # Delta refused the MERGE it ran over: nothing of it was written, and the fence
            # sent it again on their commit.
            assert "Delta refused the write inside its commit, nothing of it written" in output
            assert f"sending it again on v{vb + 1}" in output
        assert rows(spark, TABLE.format(t=table)) == CONVERGED

    @pytest.mark.parametrize("timing", ["between", "during"])
    def test_their_update_of_a_key_is_refused_and_a_rerun_converges(
        self, project, spark, monkeypatch, timing
    ):
        table, vb, after, results, _ = self.race(
            project, spark, monkeypatch, timing, False, foreign=UPDATED
        )
        assert [e.operation for e in after] == ["UPDATE"]  # nothing of ours landed
        message = results.results[0].message
        assert f"fenced insert into {table}" in message.lower()
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} UPDATE" in message
        assert "changed rows, among them rows with a key (id) this model writes" in message
        assert "never written: the table is as the other writer(s) left it." in message
        if timing == "during":
            assert "Delta's conflict detection during the write" in message
        updated = [(1, "theirs"), (2, "b"), (3, "c")]
        assert rows(spark, TABLE.format(t=table)) == updated

        run_dbt(["run", "--vars", json.dumps({"batch": BATCH})])
        assert rows(spark, TABLE.format(t=table)) == [*updated, (4, "ours"), (5, "ours")]


class TestStockSameJob(StockSparkProfile, InsertRace):
    """The control: stock dbt-spark doing the same job, as a merge on the key or as an append
    that skips keys it already has."""

    @pytest.mark.parametrize("strategy", ["merge", "append"])
    def test_during_fails_with_deltas_raw_error(self, project, spark, monkeypatch, strategy):
        table, vb, after, results, _ = self.race(
            project, spark, monkeypatch, "during", False, strategy=strategy
        )
        message = results.results[0].message
        assert "DELTA_CONCURRENT_APPEND" in message and "Please retry the operation" in message
        assert [e.operation for e in after] == ["WRITE"]
        assert rows(spark, TABLE.format(t=table)) == UNTOUCHED

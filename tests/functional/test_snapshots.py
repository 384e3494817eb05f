"""dbt snapshot is a fenced node: the snapshot table is read at vB, staged in a temp view of
the run's own, its new columns are a step of ours, its MERGE is tagged and verified. Every race
is another session (or Thrift client, or a second `dbt snapshot` over thrift) committing at a
moment of the run, proven from DESCRIBE HISTORY; stock dbt-spark runs the same races as the
control."""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, ForeignWriter, history, long_spark_job, rows

OPEN_1_AND_2 = "(1, 'open', timestamp'2024-01-01'), (2, 'open', timestamp'2024-01-01')"
SNAPSHOT = """
{% snapshot orders_snap %}
{{ config(
    target_schema=target.schema,
    unique_key='id',
    strategy=var('strategy', 'check'),
    check_cols=['status'],
    updated_at='updated_at',
    hard_deletes=var('hard_deletes', 'ignore'),
    fence_retries=var('retries', 0),
) }}
select id, status, 'loaded' as note, updated_at
from values {{ var('rows', OPEN_1_AND_2) }}
  as source(id, status, updated_at)
{% if var('slow', false) %}
  {#-- a slow write for the "during" race: a Spark job (Spark folds filters over VALUES on the
       driver), 4 s per source row --#}
  cross join (select id as r from range(1)) as slow
  where reflect('java.lang.Thread', 'sleep', cast(4000 + r as bigint)) is not null
{% endif %}
{% endsnapshot %}
""".replace("OPEN_1_AND_2", json.dumps(OPEN_1_AND_2))

SHIP_1 = "(1, 'shipped', timestamp'2024-01-02'), (2, 'open', timestamp'2024-01-01')"
CURRENT = "select id, status, note from {t} where dbt_valid_to is null order by id"


def snapshot(expect_pass: bool = True, **dbt_vars):
    return run_dbt(["snapshot", "--vars", json.dumps(dbt_vars)], expect_pass=expect_pass)


class SnapshotProject:
    @pytest.fixture(scope="class")
    def snapshots(self):
        return {"orders_snap.sql": SNAPSHOT}

    @pytest.fixture
    def table(self, project, spark):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        snapshot()
        return table


class TestFencedSnapshot(SnapshotProject):
    def test_tagged_verified_and_reported(self, project, spark, table):
        vb = history(spark, table)[-1].version
        results, output = run_dbt_and_capture(["snapshot", "--vars", json.dumps({"rows": SHIP_1})])
        [result] = results.results
        commit = history(spark, table)[-1]
        assert commit.operation == "MERGE" and commit.version == vb + 1
        assert commit.tag["strategy"] == "snapshot" and commit.tag["read_version"] == vb
        assert commit.read_version == vb
        response = result.adapter_response
        assert response["read_version"] == vb and response["commit_version"] == vb + 1
        assert response["fence_outcome"] == "committed"
        assert f"fenced snapshot into {table}: read v{vb} -> committed v{vb + 1}" in output
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "loaded"),
        ]
        # No persistent staging view is left, and none was ever named <snapshot>__dbt_tmp.
        assert not rows(spark, f"show views in {project.test_schema}")
        assert "orders_snap__dbt_tmp" not in output


# A notebook annotates a row of the snapshot table (a column the snapshot does not check) while
# the snapshot runs: a write any lost update would erase.
AUDIT_2 = "update {t} set note = 'audited' where id = 2"


class SnapshotRace(SnapshotProject):
    def race(self, project, spark, monkeypatch, timing, expect_pass, statement=AUDIT_2):
        """`statement` from another session before vB, between vB and the MERGE (the staging
        is built) or during the MERGE; returns vB, the commits after it and the results."""
        table = f"{project.test_schema}.orders_snap"
        vb = history(spark, table)[-1].version
        sql = statement.format(t=table)
        dbt_vars = {"rows": SHIP_1}
        if timing == "during":
            foreign = ForeignWriter(spark)
            foreign.when(long_spark_job(spark), sql)
            dbt_vars["slow"] = True
        else:
            foreign = ForeignAt(
                monkeypatch, spark, {"before": "compiled", "between": "staged"}[timing], sql
            )
        results = snapshot(expect_pass, **dbt_vars)
        if timing == "during":
            foreign.join()
        else:
            assert foreign.fired == 1
        monkeypatch.undo()
        after = [e for e in history(spark, table) if e.version > vb]
        theirs = [e for e in after if e.tag is None and e.operation == "UPDATE"]
        assert len(theirs) == 1  # the foreign commit landed, as intended
        return table, vb, after, theirs[0], results


class TestStockSnapshotRaces(StockSparkProfile, SnapshotRace):
    """The control: dbt-spark's own snapshot, same races."""

    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"snapshots": {"+file_format": "delta"}}

    @pytest.mark.parametrize("timing", ["before", "between"])
    def test_sees_the_foreign_commit_at_these_timings(
        self, project, spark, monkeypatch, table, timing
    ):
        # dbt-spark's staging view is evaluated by the MERGE itself, at the latest version.
        table, vb, after, theirs, _ = self.race(project, spark, monkeypatch, timing, True)
        assert [e.operation for e in after] == ["UPDATE", "MERGE"]
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "audited"),
        ]

    def test_during_the_merge_fails_with_deltas_raw_error(self, project, spark, monkeypatch, table):
        table, vb, after, theirs, results = self.race(project, spark, monkeypatch, "during", False)
        message = results.results[0].message
        assert "DELTA_CONCURRENT_APPEND" in message and "Please retry the operation" in message
        assert "at org.apache.spark" in message  # the JVM's stack, as the user sees it
        assert [e.operation for e in after] == ["UPDATE"]
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "open", "loaded"),
            (2, "open", "audited"),
        ]


class TestFencedSnapshotRaces(SnapshotRace):
    def test_before_vb_the_run_reads_it(self, project, spark, monkeypatch, table):
        table, vb, after, theirs, _ = self.race(project, spark, monkeypatch, "before", True)
        assert [e.operation for e in after] == ["UPDATE", "MERGE"]
        assert after[1].tag["read_version"] == theirs.version == vb + 1
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "audited"),
        ]

    @pytest.mark.parametrize("timing", ["between", "during"])
    def test_refused_nothing_of_ours_remains_and_a_rerun_converges(
        self, project, spark, monkeypatch, table, timing
    ):
        before = rows(spark, f"select * from {table} order by id, dbt_valid_from")
        table, vb, after, theirs, results = self.race(project, spark, monkeypatch, timing, False)
        message = results.results[0].message
        assert (
            f"Fenced snapshot into {table}" in message or f"fenced snapshot into {table}" in message
        )
        assert f"read version (vB): {vb}" in message and f"v{theirs.version} UPDATE" in message
        standing = [e for e in history(spark, table) if e.version > vb]
        if "written and reverted" in message:
            ours = [e for e in standing if e.tag and e.tag.get("step") == "write"]
            assert [e.operation for e in standing][-1] == "RESTORE" and ours
        else:
            assert "never written" in message
            assert [e.operation for e in standing] == ["UPDATE"]
        # The table is exactly as the other writer left it.
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "open", "loaded"),
            (2, "open", "audited"),
        ]
        assert len(rows(spark, f"select * from {table}")) == len(before)

        snapshot(rows=SHIP_1)
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "audited"),
        ]

"""dbt snapshot is a fenced node: the snapshot table is read at vB, staged in a temp view of
the run's own, its new columns are a step of ours, its MERGE is tagged and verified. Every race
is another session (or Thrift client, or a second `dbt snapshot` over thrift) committing at a
moment of the run, proven from DESCRIBE HISTORY; stock dbt-spark runs the same races as the
control."""

import json
import os
import subprocess
import sys

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
    updated_at='updated_at',
    hard_deletes=var('hard_deletes', 'ignore'),
    fence_retries=var('retries', 0),
    fenced=var('fenced', true),
) }}
{% if var('strategy', 'check') == 'check' %}{{ config(check_cols=['status']) }}{% endif %}
select id, status, 'loaded' as note, updated_at
  {%- if var('extra', false) %}, 'new' as extra {%- endif %}
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


# Order 1 ships and order 2 is gone from the source.
SHIP_1_DROP_2 = "(1, 'shipped', timestamp'2024-01-02')"
# Rows per hard_deletes mode after SHIP_1_DROP_2: current (id, status, note), and all rows.
HARD_DELETES = {
    "ignore": ([(1, "shipped", "loaded"), (2, "open", "loaded")], 3),
    "invalidate": ([(1, "shipped", "loaded")], 3),
    "new_record": ([(1, "shipped", "loaded"), (2, "open", "loaded")], 4),
}


# The staging SQL of each mode is dbt's, the same on both profiles; over thrift one combination
# runs the fence's path, to keep `make test` inside CI's time.
MATRIX_ON_SESSION = pytest.mark.skip_profile(
    "thrift",
    reason="dbt's staging SQL per mode is profile-independent; thrift runs check/invalidate",
)
MODES = [
    pytest.param(
        strategy,
        mode,
        marks=[] if (strategy, mode) == ("check", "invalidate") else [MATRIX_ON_SESSION],
    )
    for strategy in ("check", "timestamp")
    for mode in HARD_DELETES
]


class TestFencedSnapshot(SnapshotProject):
    @pytest.mark.parametrize("strategy, hard_deletes", MODES)
    def test_tagged_verified_and_reported(self, project, spark, logs_dir, strategy, hard_deletes):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        modes = {"strategy": strategy, "hard_deletes": hard_deletes}
        snapshot(**modes)
        vb = history(spark, table)[-1].version
        results, output = run_dbt_and_capture(
            ["snapshot", "--vars", json.dumps({"rows": SHIP_1_DROP_2, **modes})]
        )
        [result] = results.results
        commit = history(spark, table)[-1]
        assert commit.operation == "MERGE" and commit.version == vb + 1
        assert commit.tag["strategy"] == "snapshot" and commit.tag["read_version"] == vb
        assert commit.read_version == vb
        response = result.adapter_response
        assert response["read_version"] == vb and response["commit_version"] == vb + 1
        assert response["fence_outcome"] == "committed"
        assert f"fenced snapshot into {table}: read v{vb} -> committed v{vb + 1}" in output
        current, total = HARD_DELETES[hard_deletes]
        assert rows(spark, CURRENT.format(t=table)) == current
        assert len(rows(spark, f"select * from {table}")) == total
        # No persistent staging view is left; the staging read the snapshot table at vB.
        views = rows(spark, f"show views in {project.test_schema} like 'orders_snap*'")
        assert not views  # no staging view of this snapshot, temp or persistent, outlives it
        with open(f"{logs_dir}/dbt.log") as log:
            assert f"from {table} VERSION AS OF {vb}" in log.read()

    def test_new_columns_are_a_step_of_ours(self, project, spark, table):
        vb = history(spark, table)[-1].version
        snapshot(rows=SHIP_1, extra=True)
        alter, merge = history(spark, table)[-2:]
        assert alter.operation == "ADD COLUMNS" and alter.version == vb + 1
        assert alter.tag["step"] == "schema_change" and alter.tag["read_version"] == vb
        assert merge.operation == "MERGE" and merge.read_version == vb + 1
        assert merge.tag["expected_version"] == vb + 1
        assert rows(spark, f"select id, extra from {table} where dbt_valid_to is null order by id")[
            0
        ] == (1, "new")

    def test_fenced_false_is_dbt_sparks_snapshot(self, project, spark, logs_dir, table):
        _, output = run_dbt_and_capture(
            ["snapshot", "--vars", json.dumps({"rows": SHIP_1, "fenced": False})]
        )
        commit = history(spark, table)[-1]
        assert commit.operation == "MERGE" and commit.tag is None
        assert "fenced snapshot" not in output
        with open(f"{logs_dir}/dbt.log") as log:
            assert "orders_snap__dbt_tmp" in log.read()  # dbt-spark's shared staging view

    @pytest.mark.parametrize(
        "dbt_vars, words",
        [
            ({"retries": -1}, ["`fence_retries`", "-1"]),
            ({"fenced": "no"}, ["`fenced`", '"no"']),
        ],
    )
    def test_bad_config_names_the_snapshot_and_writes_nothing(
        self, project, spark, table, dbt_vars, words
    ):
        before = history(spark, table)[-1].version
        results = snapshot(False, rows=SHIP_1, **dbt_vars)
        message = results.results[0].message
        assert f"Snapshot {table}" in message
        for word in words:
            assert word in message
        assert history(spark, table)[-1].version == before


# A notebook annotates a row of the snapshot table (a column the snapshot does not check) while
# the snapshot runs: a write any lost update would erase.
AUDIT_2 = "update {t} set note = 'audited' where id = 2"


class SnapshotRace(SnapshotProject):
    def race(self, project, spark, monkeypatch, timing, expect_pass, statement=AUDIT_2, **more):
        """`statement` from another session before vB, between vB and the MERGE (the staging
        is built) or during the MERGE; returns vB, the commits after it and the results."""
        table = f"{project.test_schema}.orders_snap"
        vb = history(spark, table)[-1].version
        sql = statement.format(t=table)
        dbt_vars = {"rows": SHIP_1, **more}
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


class TestFencedSnapshotRetries(SnapshotRace):
    def test_a_retry_restages_at_their_version_and_commits(
        self, project, spark, monkeypatch, table
    ):
        table, vb, after, theirs, results = self.race(
            project, spark, monkeypatch, "between", True, retries=1
        )
        [merge] = [e for e in after if e.operation == "MERGE"]
        assert merge.read_version == theirs.version == vb + 1 and merge.tag["attempt"] == 2
        assert results.results[0].adapter_response["read_version"] == vb + 1
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "audited"),
        ]


# Two `dbt snapshot` invocations of one snapshot (a double-fired job, two backfills with different
# --vars): the second is another dbt process, which runs its whole snapshot while the first has
# built its staging and not started its MERGE.
TWO_PROCESSES = (
    "session",
    "two dbt processes on the embedded session would be two Spark JVMs writing one local Delta "
    "table, which Delta does not make safe (docs/limits.md); over thrift both are clients of "
    "one server",
)
CANCEL_1 = "(1, 'cancelled', timestamp'2024-01-03'), (2, 'open', timestamp'2024-01-01')"


class OtherInvocation(SnapshotProject):
    def other_snapshot(self, project, tmp_path, source_rows):
        """A callable running `dbt snapshot` in another process with its own --vars; its
        CompletedProcess lands in the returned list."""
        done: list[subprocess.CompletedProcess] = []
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        args = [dbt, "snapshot", "--project-dir", project.project_root]
        args += ["--profiles-dir", project.profiles_dir, "--target-path", str(tmp_path / "t")]
        args += ["--log-path", str(tmp_path / "l"), "--vars", json.dumps({"rows": source_rows})]

        def run():
            done.append(subprocess.run(args, capture_output=True, text=True, timeout=600))

        return run, done

    def race(self, project, spark, monkeypatch, tmp_path, theirs_rows, expect_pass):
        table = f"{project.test_schema}.orders_snap"
        vb = history(spark, table)[-1].version
        run, done = self.other_snapshot(project, tmp_path, theirs_rows)
        foreign = ForeignAt(monkeypatch, spark, "staged", [run])
        results = snapshot(expect_pass, rows=SHIP_1)
        monkeypatch.undo()
        assert foreign.fired == 1 and len(done) == 1
        return table, vb, done[0], results


@pytest.mark.skip_profile(*TWO_PROCESSES[:1], reason=TWO_PROCESSES[1])
class TestStockTwoInvocations(StockSparkProfile, OtherInvocation):
    @pytest.fixture(scope="class")
    def project_config_update(self):
        return {"snapshots": {"+file_format": "delta"}}

    def test_the_other_run_drops_our_staging_view(
        self, project, spark, monkeypatch, tmp_path, table
    ):
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, OPEN_1_AND_2, False
        )
        assert other.returncode == 0, other.stdout[-2000:]
        # The other run changed nothing, and dropped the shared orders_snap__dbt_tmp on its way.
        assert history(spark, table)[-1].version == vb
        message = results.results[0].message
        assert "orders_snap__dbt_tmp" in message and "TABLE_OR_VIEW_NOT_FOUND" in message


@pytest.mark.skip_profile(*TWO_PROCESSES[:1], reason=TWO_PROCESSES[1])
class TestFencedTwoInvocations(OtherInvocation):
    def test_their_staging_is_not_ours(self, project, spark, monkeypatch, tmp_path, table):
        # The other run (other --vars) finds nothing to change: ours commits from its own staging.
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, OPEN_1_AND_2, True
        )
        assert other.returncode == 0, other.stdout[-2000:]
        [merge] = [e for e in history(spark, table) if e.version > vb]
        assert merge.tag["strategy"] == "snapshot" and merge.read_version == vb
        assert rows(spark, CURRENT.format(t=table)) == [
            (1, "shipped", "loaded"),
            (2, "open", "loaded"),
        ]

    def test_racing_runs_refuse_and_leave_one_current_row_per_key(
        self, project, spark, monkeypatch, tmp_path, table
    ):
        table, vb, other, results = self.race(
            project, spark, monkeypatch, tmp_path, CANCEL_1, False
        )
        assert other.returncode == 0, other.stdout[-2000:]
        after = [e for e in history(spark, table) if e.version > vb]
        # Their MERGE landed after our vB, and nothing of ours did.
        assert [e.operation for e in after] == ["MERGE"] and after[0].tag["node"].endswith(
            "orders_snap"
        )
        assert after[0].tag["step"] == "write"  # theirs: the other run, fenced too
        message = results.results[0].message
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} MERGE" in message
        assert "never written: the table is as the other writer(s) left it." in message
        current = rows(spark, CURRENT.format(t=table))
        assert current == [(1, "cancelled", "loaded"), (2, "open", "loaded")]

        snapshot(rows=SHIP_1)
        current = rows(spark, CURRENT.format(t=table))
        assert current == [(1, "shipped", "loaded"), (2, "open", "loaded")]
        ids = [r[0] for r in current]
        assert len(ids) == len(set(ids))  # exactly one current row per key

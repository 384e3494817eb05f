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
    updated_at='updated_at',
    hard_deletes=var('hard_deletes', 'ignore'),
    fence_retries=var('retries', 0),
    fenced=var('fenced', true),
    fence_batch_id=var('batch_id', none),
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


def views_on_the_nodes_connection(monkeypatch, schema: str) -> dict[str, list[str]]:
    """The snapshot's views as its own connection sees them (temp views live in that
    connection's session only): once its staging is built, and once it has finished."""
    from dbt.adapters.spark.impl import SparkAdapter

    from dbt.adapters.fenced_spark.impl import FencedSparkAdapter

    seen: dict[str, list[str]] = {}

    def views(adapter) -> list[str]:
        _, table = adapter.execute(f"show views in {schema} like 'orders_snap*'", fetch=True)
        return [row["viewName"] for row in table]

    staged, finished = SparkAdapter.expand_target_column_types, FencedSparkAdapter.post_model_hook

    def on_staged(adapter, *args, **kwargs):
        seen["staged"] = views(adapter)
        return staged(adapter, *args, **kwargs)

    def on_finished(adapter, *args, **kwargs):
        seen["finished"] = views(adapter)
        return finished(adapter, *args, **kwargs)

    monkeypatch.setattr(SparkAdapter, "expand_target_column_types", on_staged)
    monkeypatch.setattr(FencedSparkAdapter, "post_model_hook", on_finished)
    return seen


class TestFencedSnapshot(SnapshotProject):
    def test_a_batch_id_is_refused_before_any_sql(self, project, spark):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        results = run_dbt(["snapshot", "--vars", json.dumps({"batch_id": "d1"})], expect_pass=False)
        message = results.results[0].message
        assert f"Snapshot {table}: `fence_batch_id` is for incremental models" in message
        assert not spark.sql(f"show tables in {project.test_schema} like 'orders_snap'").collect()

    @pytest.mark.parametrize("strategy, hard_deletes", MODES)
    def test_tagged_verified_and_reported(
        self, project, spark, logs_dir, monkeypatch, strategy, hard_deletes
    ):
        table = f"{project.test_schema}.orders_snap"
        spark.sql(f"drop table if exists {table}")
        modes = {"strategy": strategy, "hard_deletes": hard_deletes}
        snapshot(**modes)
        vb = history(spark, table)[-1].version
        views = views_on_the_nodes_connection(monkeypatch, project.test_schema)
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
        # The staging view is the run's own, and the node's connection no longer has it when
        # the snapshot is done (the same query saw it while staged); nothing persistent either.
        [staging] = views["staged"]
        assert staging.startswith("orders_snap__fence_"), views
        assert views["finished"] == [], views
        assert not rows(spark, f"show views in {project.test_schema} like 'orders_snap*'")
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
        # Nothing of ours was ever written: between vB and the MERGE the pre-check refuses;
        # during the MERGE Delta does, inside its commit (the foreign UPDATE landed while the
        # slowed MERGE ran: only Delta's own check sees it then).
        assert "never written" in message
        assert [e.operation for e in standing] == ["UPDATE"]
        detector = {
            "between": "detected by: pre-check: ",
            "during": "detected by: Delta's conflict detection during the write (",
        }[timing]
        assert f"{detector}" in message, message
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

"""Conflicts, not commits: a foreign commit after vB refuses the node only when it changed what
the node read or writes (or the table itself), on real Spark + Delta.

Each foreign commit lands from another session right after vB is captured (`ForeignAt`
"vb"), is read back from DESCRIBE HISTORY first, and the outcome is judged from the table's
rows and history. Stock dbt-spark is the control where it loses data.
"""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import (
    ForeignAt,
    ForeignWriter,
    commit_actions,
    history,
    ours,
    rows,
)

# Writes row 1 from what it reads of row 2: a read-modify-write on two keys.
MERGE_READS_ROW_2 = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          fence_isolation=var('isolation', 'snapshot')) }}
{% if is_incremental() %}
select 1 as id, concat('seen:', (select max(v) from {{ this }} where id = 2)) as v
{% else %}
select * from values (1, 'one'), (2, 'two') as t(id, v)
{% endif %}
"""

APPENDED = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select id from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""

# Partitioned by p; replaces p = 'a' and reads only p = 'a' of itself.
REPLACED = """
{{ config(materialized='incremental', incremental_strategy='replace_where',
          incremental_predicates=["p = 'a'"], partition_by=['p']) }}
{% if is_incremental() %}
select id + 100 as id, p from {{ this }} where p = 'a'
{% else %}
select * from values (1, 'a'), (2, 'b') as t(id, p)
{% endif %}
"""

# The watermark append over p = 'a': appends the next id of partition a.
WATERMARK = """
{{ config(materialized='incremental', incremental_strategy='append', partition_by=['p']) }}
{% if is_incremental() %}
select max(id) + 1 as id, 'a' as p from {{ this }} where p = 'a'
{% else %}
select * from values (1, 'a'), (2, 'b') as t(id, p)
{% endif %}
"""

# The same watermark, its session parsing string literals raw ('a\b' is a, backslash, b).
RAW_LITERALS = r"""
{{ config(materialized='incremental', incremental_strategy='append', partition_by=['p'],
          pre_hook="set spark.sql.parser.escapedStringLiterals=true") }}
{% if is_incremental() %}
select max(id) + 1 as id, 'a\b' as p from {{ this }} where p = 'a\b'
{% else %}
select * from values (1, 'a\b'), (2, 'b') as t(id, p)
{% endif %}
"""


def race(project, spark, monkeypatch, model, foreign, expect_pass, setup=(), **dbt_vars):
    """Full refresh, optional commits before vB, then the run with `foreign` landing right
    after vB: returns the table, vB, the commits after vB and the run's output. `{t}` in a
    statement is the table; `{before}` in `foreign`, the version before vB."""
    run_dbt(["run", "--full-refresh", "--select", model])
    table = f"{project.test_schema}.{model}"
    for statement in setup:
        ForeignWriter(spark).sql(statement.format(t=table))
    vb = history(spark, table)[-1].version
    at = ForeignAt(monkeypatch, spark, "vb", foreign.format(t=table, before=vb - 1))
    args = ["run", "--select", model, "--vars", json.dumps(dbt_vars)]
    results, output = run_dbt_and_capture(args, expect_pass=expect_pass)
    assert at.fired == 1
    after = [e for e in history(spark, table) if e.version > vb]
    # The race fired where intended: the foreign commit is the first one after vB, untagged.
    assert after[0].version == vb + 1 and after[0].tag is None
    return table, vb, after, results, output


class TestMergeConflicts:
    @pytest.fixture(scope="class")
    def models(self):
        return {"merged.sql": MERGE_READS_ROW_2}

    def table_rows(self, spark, table):
        return rows(spark, f"select id, v from {table} order by id")

    def test_an_insert_of_another_key_is_committed_over(self, project, spark, monkeypatch):
        foreign = "insert into {t} values (3, 'three')"
        table, vb, after, results, output = race(
            project, spark, monkeypatch, "merged", foreign, True
        )
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        write = after[1]
        assert write.tag["read_version"] == vb and write.tag["tolerated"] == [vb + 1]
        assert write.read_version == vb + 1
        assert self.table_rows(spark, table) == [(1, "seen:two"), (2, "two"), (3, "three")]
        response = results.results[0].adapter_response
        assert response["fence_outcome"] == "committed"
        assert response["commit_version"] == write.version
        assert response["tolerated"] == [
            f"v{vb + 1} WRITE: changed rows outside what this model read or writes"
        ]
        assert f"committed v{write.version} over v{vb + 1} WRITE: changed rows outside" in output

    def test_an_optimize_is_committed_over(self, project, spark, monkeypatch):
        # Two more files before vB, so that OPTIMIZE has something to compact.
        setup = ["insert into {t} values (8, 'eight')", "insert into {t} values (9, 'nine')"]
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "merged", "optimize {t}", True, setup=setup
        )
        assert [e.operation for e in after] == ["OPTIMIZE", "MERGE"]
        assert after[1].tag["tolerated"] == [vb + 1]
        # Its writer's claim, which its files' row counts bear out: no row of it is read.
        assert results.results[0].adapter_response["tolerated"] == [
            f"v{vb + 1} OPTIMIZE: marked no data change by its writer"
        ]
        assert self.table_rows(spark, table) == [
            (1, "seen:two"),
            (2, "two"),
            (8, "eight"),
            (9, "nine"),
        ]

    def test_an_update_of_the_row_it_writes_is_refused(self, project, spark, monkeypatch):
        foreign = "update {t} set v = 'theirs' where id = 1"
        table, vb, after, results, _ = race(project, spark, monkeypatch, "merged", foreign, False)
        assert [e.operation for e in after] == ["UPDATE"]  # nothing of ours landed
        message = results.results[0].message
        assert f"v{vb + 1} UPDATE" in message and "never written" in message
        assert "changed rows, among them rows with a key (id) this model writes" in message
        assert self.table_rows(spark, table) == [(1, "theirs"), (2, "two")]

    def test_an_update_of_the_row_it_read_is_refused(self, project, spark, monkeypatch):
        foreign = "update {t} set v = 'theirs' where id = 2"
        table, vb, after, results, _ = race(project, spark, monkeypatch, "merged", foreign, False)
        assert [e.operation for e in after] == ["UPDATE"]
        message = results.results[0].message
        assert "changed rows, among them rows this model read (where (id = 2))" in message
        assert "never written" in message
        assert self.table_rows(spark, table) == [(1, "one"), (2, "theirs")]

    def test_a_rewrite_marked_no_data_change_that_dropped_the_row_it_read_is_refused(
        self, project, spark, monkeypatch
    ):
        # Its writer marks the rewrite `dataChange: false` and drops row 2, which the model
        # read: the fence took that claim as fact (found by the hostile review of issue 60).
        foreign = (
            "insert overwrite {t} with ('dataChange' = 'false') select * from {t} where id != 2"
        )
        table, vb, after, results, _ = race(project, spark, monkeypatch, "merged", foreign, False)
        assert [e.operation for e in after] == ["WRITE"]  # nothing of ours landed
        [add] = [b for k, b in commit_actions(spark, table, vb + 1) if k == "add"]
        assert add["dataChange"] is False
        message = results.results[0].message
        assert (
            f"v{vb + 1} WRITE: marked no data change by its writer, yet it wrote 1 row "
            "(numOutputRows) in place of files whose rows its log does not count: changed rows, "
            "among them rows this model read (where (id = 2))"
        ) in message
        assert "never written" in message
        assert self.table_rows(spark, table) == [(1, "one")]

    def test_version_isolation_refuses_any_commit(self, project, spark, monkeypatch):
        foreign = "insert into {t} values (3, 'three')"
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "merged", foreign, False, isolation="version"
        )
        assert [e.operation for e in after] == ["WRITE"]
        message = results.results[0].message
        assert f"pre-check: expected v{vb}, found v{vb + 1}" in message
        assert "fence_isolation: 'version'" in message
        assert self.table_rows(spark, table) == [(1, "one"), (2, "two"), (3, "three")]


class TestStockMergeLosesTheUpdate(StockSparkProfile):
    """The control: stock dbt-spark overwrites the foreign UPDATE of row 1 with a green run."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "merged.sql": MERGE_READS_ROW_2.replace(
                ", fence_isolation=var('isolation', 'snapshot')", ""
            )
        }

    def test_stock_loses_the_update(self, project, spark, monkeypatch):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.merged"
        vb = history(spark, table)[-1].version
        at = ForeignAt(
            monkeypatch, spark, "compiled", f"update {table} set v = 'theirs' where id = 1"
        )
        run_dbt(["run"])
        after = [e for e in history(spark, table) if e.version > vb]
        assert at.fired == 1 and [e.operation for e in after] == ["UPDATE", "MERGE"]
        assert rows(spark, f"select id, v from {table} order by id") == [
            (1, "seen:two"),
            (2, "two"),
        ]


class TestStrictConflicts:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "appended.sql": APPENDED,
            "replaced.sql": REPLACED,
            "watermark.sql": WATERMARK,
            "raw_literals.sql": RAW_LITERALS,
        }

    def test_append_if_unchanged_commits_over_an_optimize(self, project, spark, monkeypatch):
        setup = ["insert into {t} values (10)", "insert into {t} values (11)"]
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "appended", "optimize {t}", True, setup, lo=3, hi=5
        )
        assert [e.operation for e in after] == ["OPTIMIZE", "WRITE"]
        assert after[1].read_version == vb + 1 and after[1].tag["tolerated"] == [vb + 1]
        ids = rows(spark, f"select id from {table} order by id")
        assert ids == [(0,), (1,), (2,), (3,), (4,), (10,), (11,)]

    def test_append_if_unchanged_is_refused_by_any_data_change(self, project, spark, monkeypatch):
        table, vb, after, results, _ = race(
            project,
            spark,
            monkeypatch,
            "appended",
            "insert into {t} values (100)",
            False,
            lo=3,
            hi=5,
        )
        assert [e.operation for e in after] == ["WRITE"]
        message = results.results[0].message
        assert "append_if_unchanged is refused by any change to the rows of its table" in message
        assert rows(spark, f"select id from {table} order by id") == [(0,), (1,), (2,), (100,)]

    def test_raw_string_literals_do_not_hide_a_commit_in_the_read_partition(
        self, project, spark, monkeypatch
    ):
        # The foreign session parses escapes: 'a\\b' is the model's partition a\b. The
        # partition test would quote it with escapes the model's session keeps (found by the
        # hostile review of 2026-11-25: tolerated, id 3 where 51 is right).
        table, vb, after, results, _ = race(
            project,
            spark,
            monkeypatch,
            "raw_literals",
            r"insert into {t} values (50, 'a\\b')",
            False,
        )
        assert [e.operation for e in after] == ["WRITE"]
        assert rows(spark, f"select p from {table} where id = 50") == [("a\\b",)]
        message = results.results[0].message
        assert f"v{vb + 1} WRITE: changed rows in partition p=a\\b" in message
        assert "among them rows this model read" in message
        ids = rows(spark, f"select id from {table} where p = 'a\\\\b' order by id")
        assert ids == [(1,), (50,)]

    def test_replace_where_commits_over_another_partition(self, project, spark, monkeypatch):
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "replaced", "insert into {t} values (3, 'b')", True
        )
        assert [e.operation for e in after] == ["WRITE", "WRITE"]
        assert after[1].tag["tolerated"] == [vb + 1]
        reason = results.results[0].adapter_response["tolerated"][0]
        # Decided from the commit's partition values, without reading its rows.
        outside = "outside the partitions this model read or writes"
        assert reason == f"v{vb + 1} WRITE: changed data in partition p=b, {outside}"
        assert rows(spark, f"select id, p from {table} order by id") == [
            (2, "b"),
            (3, "b"),
            (101, "a"),
        ]

    def test_replace_where_is_refused_by_a_row_in_its_range(self, project, spark, monkeypatch):
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "replaced", "insert into {t} values (3, 'a')", False
        )
        assert [e.operation for e in after] == ["WRITE"]
        message = results.results[0].message
        assert f"v{vb + 1} WRITE by " in message
        assert "CONFLICT: changed rows in partition p=a, among them rows" in message
        assert "this model read (where (p = 'a'))" in message
        assert rows(spark, f"select id, p from {table} order by id") == [
            (1, "a"),
            (2, "b"),
            (3, "a"),
        ]

    @staticmethod
    def restored(project, spark, monkeypatch, partition, expect_pass):
        """`replaced`, raced by a RESTORE right after vB that undoes the commit before vB, an
        insert of id 3 into `partition`."""
        setup = [f"insert into {{t}} values (3, '{partition}')"]
        foreign = "restore table {t} to version as of {before}"
        return race(project, spark, monkeypatch, "replaced", foreign, expect_pass, setup)

    def test_replace_where_commits_over_a_restore_of_another_partition(
        self, project, spark, monkeypatch
    ):
        # Delta writes the table's own metaData and protocol into every RESTORE: it is judged
        # by the files it removed, here one of partition b (was refused as "changed the table
        # itself (metaData, protocol)").
        table, vb, after, results, _ = self.restored(project, spark, monkeypatch, "b", True)
        assert [e.operation for e in after] == ["RESTORE", "WRITE"]
        assert after[1].tag["tolerated"] == [vb + 1] and after[1].read_version == vb + 1
        kinds = [k for k, _ in commit_actions(spark, table, vb + 1)]
        assert {"metaData", "protocol", "remove"} <= set(kinds) and "add" not in kinds
        reason = results.results[0].adapter_response["tolerated"][0]
        outside = "outside the partitions this model read or writes"
        assert reason == f"v{vb + 1} RESTORE: changed data in partition p=b, {outside}"
        # Id 3 went with the RESTORE; partition a is the model's.
        assert rows(spark, f"select id, p from {table} order by id") == [(2, "b"), (101, "a")]

    def test_replace_where_is_refused_by_a_restore_of_rows_it_read(
        self, project, spark, monkeypatch
    ):
        table, vb, after, results, _ = self.restored(project, spark, monkeypatch, "a", False)
        assert [e.operation for e in after] == ["RESTORE"]
        message = results.results[0].message
        assert (
            f"v{vb + 1} RESTORE: changed rows in partition p=a, among them rows this model read "
            "(where (p = 'a'))"
        ) in message
        assert "changed the table itself" not in message and "never written" in message
        assert rows(spark, f"select id, p from {table} order by id") == [(1, "a"), (2, "b")]

    def test_self_reading_append_commits_over_another_partition(self, project, spark, monkeypatch):
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "watermark", "insert into {t} values (7, 'b')", True
        )
        assert [e.operation for e in after] == ["WRITE", "WRITE"]
        assert after[1].tag["tolerated"] == [vb + 1] and after[1].read_version == vb + 1
        assert rows(spark, f"select id, p from {table} order by id") == [
            (1, "a"),
            (2, "a"),
            (2, "b"),
            (7, "b"),
        ]

    def test_self_reading_append_is_refused_by_its_partition(self, project, spark, monkeypatch):
        table, vb, after, results, _ = race(
            project, spark, monkeypatch, "watermark", "insert into {t} values (2, 'a')", False
        )
        assert [e.operation for e in after] == ["WRITE"]
        assert "in partition p=a, among them rows this model read" in results.results[0].message
        # Stock would append id 2 to partition a a second time.
        assert rows(spark, f"select id, p from {table} order by id") == [
            (1, "a"),
            (2, "a"),
            (2, "b"),
        ]


# Inserts the keys the table lacks; its rows do not depend on the table.
INSERTED = """
{{ config(materialized='incremental', incremental_strategy='insert', unique_key='id') }}
{% if is_incremental() %}
select * from values (2, 'mine'), (3, 'mine'), (4, 'mine') as t(id, v)
{% else %}
select * from values (1, 'one'), (2, 'two') as t(id, v)
{% endif %}
"""


class TestInsertConflicts:
    @pytest.fixture(scope="class")
    def models(self):
        return {"inserted.sql": INSERTED}

    def test_a_foreign_insert_of_its_key_is_committed_over(self, project, spark, monkeypatch):
        # Its MERGE inserts only keys not in the table at its own snapshot, which holds the
        # foreign row: the serial result, foreign insert first (was refused as a key conflict).
        foreign = "insert into {t} values (3, 'theirs')"
        table, vb, after, results, output = race(
            project, spark, monkeypatch, "inserted", foreign, True
        )
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        write = after[1]
        assert write.tag["tolerated"] == [vb + 1] and write.read_version == vb + 1
        assert rows(spark, f"select id, v from {table} order by id") == [
            (1, "one"),
            (2, "two"),
            (3, "theirs"),
            (4, "mine"),
        ]
        reason = (
            f"v{vb + 1} WRITE: only inserted rows, none this model read and none with a key (id) "
            "it wrote: its MERGE inserts only keys not in the table, so committing gives the "
            "serial result"
        )
        assert results.results[0].adapter_response["tolerated"] == [reason]
        assert f"committed v{write.version} over {reason}" in output

    def test_a_foreign_update_of_its_key_is_refused(self, project, spark, monkeypatch):
        foreign = "update {t} set v = 'theirs' where id = 2"
        table, vb, after, results, _ = race(project, spark, monkeypatch, "inserted", foreign, False)
        assert [e.operation for e in after] == ["UPDATE"]
        message = results.results[0].message
        assert "changed rows, among them rows with a key (id) this model writes" in message
        assert rows(spark, f"select id, v from {table} order by id") == [(1, "one"), (2, "theirs")]


AUTO_COMPACTED = """
{{ config(materialized='incremental', incremental_strategy=var('strategy'),
          unique_key='id' if var('strategy') == 'merge' else none,
          tblproperties={'delta.autoOptimize.autoCompact': 'true'}) }}
select id, {{ var('round', 0) }} as round from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""


class TestAutoCompaction:
    """Delta commits an OPTIMIZE right after our write, in our session, carrying our tag:
    it is neither our write nor a conflict, and every run commits."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"compacted.sql": AUTO_COMPACTED}

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # Compact after every few files: each run then triggers it.
        return {"models": {"+pre-hook": "set spark.databricks.delta.autoCompact.minNumFiles=2"}}

    @pytest.mark.parametrize("strategy", ["merge", "append_if_unchanged"])
    def test_every_run_commits(self, project, spark, strategy):
        run_dbt(["run", "--full-refresh", "--vars", json.dumps({"strategy": strategy})])
        table = f"{project.test_schema}.compacted"
        start = history(spark, table)[-1].version
        for n in range(1, 4):
            dbt_vars = {"strategy": strategy, "lo": 3 * n, "hi": 3 * n + 3, "round": n}
            run_dbt(["run", "--vars", json.dumps(dbt_vars)])
        after = [e for e in history(spark, table) if e.version > start]
        compactions = [e for e in after if e.operation == "OPTIMIZE"]
        assert compactions, "auto compaction never ran: the test proves nothing"
        assert not [e for e in after if e.operation == "RESTORE"]
        assert len(ours(after)) == 3 + len([e for e in compactions if e.tag])
        ids = rows(spark, f"select id from {table} order by id")
        assert ids == [(i,) for i in range(12)]

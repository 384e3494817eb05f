"""Every statement the node sends that reads its target is a read (issue 60, item 2): a
pre-hook's `SET VAR`, `CACHE TABLE ... AS`, temp view or `EXECUTE IMMEDIATE` reads the target
pinned to vB, and counts in the footprint. Each race is another session committing right
after the statement that read (`ForeignAt(..., "statement", pattern=...)`), or right after vB,
proved from DESCRIBE HISTORY."""

import json
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, history, ours, rows

# The watermark read into a session variable by a pre-hook, then used by the model SQL.
WATERMARK = """
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append'),
          fence_retries=var('retries', 0),
          pre_hook=["declare or replace variable events_wm bigint default -1",
                    "{% if is_incremental() %}set var events_wm = "
                    ~ "(select coalesce(max(id), -1) from {{ this }}){% endif %}"]) }}
select id from range(0, {{ var('hi', 3) }}) where id > events_wm
"""

DOUBLE_FIRED = "insert into {t} values (3), (4)"
COUNTS = "select id, count(*) from {t} group by id order by id"
AFTER_SET_VAR = r"set\s+var"


def run(expect_pass: bool = True, **dbt_vars):
    return run_dbt_and_capture(["run", "--vars", json.dumps(dbt_vars)], expect_pass=expect_pass)


class WatermarkRace:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": WATERMARK}

    def race(self, project, spark, monkeypatch, expect_pass, **dbt_vars):
        """A double-fired job appends ids 3 and 4 right after the pre-hook read the watermark
        (2) into a variable."""
        run_dbt(["run", "--full-refresh", "--vars", json.dumps(dbt_vars)])
        table = f"{project.test_schema}.events"
        vb = history(spark, table)[-1].version
        foreign = ForeignAt(
            monkeypatch, spark, "statement", DOUBLE_FIRED.format(t=table), pattern=AFTER_SET_VAR
        )
        results, output = run(expect_pass, hi=5, **dbt_vars)
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and after[0].operation == "WRITE" and after[0].tag is None
        assert after[0].version == vb + 1  # landed after the watermark's read, before ours
        return table, vb, after, results, output


class TestStockSetVarWatermark(StockSparkProfile, WatermarkRace):
    """The control: stock dbt-spark appends ids 3 and 4 a second time, with a green run."""

    def test_stock_duplicates_with_a_green_run(self, project, spark, monkeypatch):
        table, _, after, _, _ = self.race(project, spark, monkeypatch, True)
        assert [e.operation for e in after] == ["WRITE", "WRITE"]
        assert rows(spark, COUNTS.format(t=table)) == [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]


class TestFencedSetVarWatermark(WatermarkRace):
    @pytest.mark.parametrize("strategy", ["append", "merge"])  # merge: no unique_key
    def test_refused_nothing_duplicated_and_a_rerun_is_exact(
        self, project, spark, monkeypatch, logs_dir, strategy
    ):
        """The blind append (or keyless merge) that reads its watermark in a pre-hook is a
        read-modify-write: fenced as append_if_unchanged, its SET VAR pinned to vB, never
        retried (the variable would keep what it read at vB)."""
        table, vb, after, results, output = self.race(
            project, spark, monkeypatch, False, strategy=strategy, retries=2
        )
        assert [e.operation for e in after] == ["WRITE"]  # nothing of ours landed
        appends = "appends" if strategy == "append" else "merges without unique_key"
        assert (
            f"{table} {appends}" in output
            and "reads {{ this }} in a pre-hook: running as append_if_unchanged (fenced)" in output
        )
        assert "does not read {{ this }}" not in output
        message = results.results[0].message
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} WRITE" in message
        assert "never written: the table is as the other writer(s) left it." in message
        assert f"detected by: pre-check: v{vb + 1} WRITE: changed" in message
        assert "not retried (fence_retries: 2): this model's pre-hooks or sql_header read" in (
            message
        )
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(5)]
        with open(f"{logs_dir}/dbt.log") as log:
            assert f"-1) from {table} VERSION AS OF {vb})" in log.read()  # the SET VAR, pinned

        monkeypatch.undo()
        run_dbt(["run", "--vars", json.dumps({"hi": 6, "strategy": strategy})])
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(6)]
        commit = history(spark, table)[-1]
        assert commit.tag["strategy"] == "append_if_unchanged"


# Two on call, each may go off call if the other stays on: the model reads row 2 through a
# session variable and turns row 1 off if row 2 is on. Row 3 is a shift nobody reads.
ON_CALL = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          pre_hook=["declare or replace variable shifts_other boolean default true",
                    "{% if is_incremental() %}set var shifts_other = "
                    ~ "(select on_call from {{ this }} where id = 2){% endif %}"]) }}
{% if is_incremental() %}
select 1 as id, not shifts_other as on_call
{% else %}
select * from values (1, true), (2, true), (3, true) as t(id, on_call)
{% endif %}
"""


class TestSetVarWriteSkew:
    """Another writer reads row 1 (on call) and turns row 2 off, right after this model's
    pre-hook read row 2 (on call) into a variable: committing both would leave nobody on
    call, a write skew no serial order gives."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"shifts.sql": ON_CALL}

    def race(self, project, spark, monkeypatch, statement):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.shifts"
        vb = history(spark, table)[-1].version
        foreign = ForeignAt(
            monkeypatch, spark, "statement", statement.format(t=table), pattern=AFTER_SET_VAR
        )
        return table, vb, foreign

    def test_refused_as_a_read_of_row_2(self, project, spark, monkeypatch):
        table, vb, foreign = self.race(
            project,
            spark,
            monkeypatch,
            # Delta takes no subquery in an UPDATE's condition: the same as a MERGE.
            "merge into {t} using (select on_call from {t} where id = 1) as r on {t}.id = 2 "
            "when matched and r.on_call then update set on_call = false",
        )
        results, _ = run(False)
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and [(e.operation, e.tag) for e in after] == [("MERGE", None)]
        message = results.results[0].message
        read = "among them rows this model read (where (id = 2))"
        assert f"v{vb + 1} MERGE: changed rows, {read}" in message
        assert "never written: the table is as the other writer(s) left it." in message
        assert rows(spark, f"select id, on_call from {table} order by id") == [
            (1, True),
            (2, False),
            (3, True),
        ]

    def test_a_row_it_did_not_read_is_tolerated(self, project, spark, monkeypatch):
        """The SET VAR's footprint is its filter (id = 2), not the whole table."""
        table, vb, foreign = self.race(
            project, spark, monkeypatch, "update {t} set on_call = false where id = 3"
        )
        results, output = run(True)
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and [e.operation for e in after] == ["UPDATE", "MERGE"]
        theirs, write = after
        assert theirs.tag is None and write.tag["tolerated"] == [theirs.version]
        assert write.tag["read_version"] == vb and write.read_version == theirs.version
        assert f"over v{theirs.version} UPDATE: changed rows outside what this model read" in (
            output
        )
        assert rows(spark, f"select id, on_call from {table} order by id") == [
            (1, False),
            (2, True),
            (3, False),
        ]


# A merge that reads the high mark of partition a through a pre-hook statement (`hook`) and
# writes the next id, with the mark it saw; `hi` is how the model SQL reads what the hook kept.
HIGH_MARK = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          partition_by=['p'],
          pre_hook=["declare or replace variable readings_hi bigint default 0",
                    "{% if is_incremental() %}"
                    ~ "{{ var('hook', '') | replace('THIS', this | string) }}{% endif %}"]) }}
{% if is_incremental() %}
select {{ var('hi', 'readings_hi') }} + 1 as id, 'a' as p, {{ var('hi', 'readings_hi') }} as seen
{% else %}
select * from values (1, 'a', 0), (2, 'a', 0), (10, 'b', 0) as t(id, p, seen)
{% endif %}
"""

HOOKS = {
    "set_var": (
        "set var readings_hi = (select max(id) from THIS where p = 'a')",
        "readings_hi",
    ),
    "cache": (
        "cache table readings_c as select max(id) as hi from THIS where p = 'a'",
        "(select hi from readings_c)",
    ),
    "cache_lazy": (
        "cache lazy table readings_l as select max(id) as hi from THIS where p = 'a'",
        "(select hi from readings_l)",
    ),
    "temp_view": (
        "create or replace temp view readings_v as select max(id) as hi from THIS where p = 'a'",
        "(select hi from readings_v)",
    ),
    "execute_immediate": (
        "execute immediate 'select max(id) from THIS where p = \"a\"' into readings_hi",
        "readings_hi",
    ),
}


class TestPinnedAndCounted:
    """Each statement that can hold a query on the target: pinned (Spark runs it at vB, the
    log shows it) and in the footprint with its filter (a foreign row in partition a refuses
    the merge, though it writes another key; one in partition b is tolerated)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"readings.sql": HIGH_MARK}

    @pytest.mark.parametrize("form", sorted(HOOKS))
    def test_a_row_it_read_refuses_one_it_did_not_read_is_tolerated(
        self, project, spark, monkeypatch, logs_dir, form
    ):
        hook, hi = HOOKS[form]
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.readings"
        vb = history(spark, table)[-1].version
        # Right after the hook's statement (a lazy cache or a view reads later, at the write).
        first_words = r"\s+".join(re.escape(w) for w in hook.split()[:2])
        foreign = ForeignAt(
            monkeypatch,
            spark,
            "statement",
            f"insert into {table} values (5, 'a', 9)",
            pattern=first_words,
        )
        results, _ = run(False, hook=hook, hi=hi)
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and [(e.operation, e.tag) for e in after] == [("WRITE", None)]
        message = results.results[0].message
        read = "among them rows this model read (where (p = 'a'))"
        assert f"v{vb + 1} WRITE: changed rows in partition p=a, {read}" in message
        assert "never written" in message
        assert rows(spark, f"select id from {table} order by id") == [(1,), (2,), (5,), (10,)]

        # A row in partition b, right after vB: tolerated, and the hook still reads vB.
        monkeypatch.undo()
        vb = vb + 1
        ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (7, 'b', 9)")
        results, output = run(True, hook=hook, hi=hi)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE", "MERGE"]
        theirs, write = after
        assert theirs.tag is None and write.tag["tolerated"] == [theirs.version]
        assert write.tag["read_version"] == vb
        assert "outside what this model read or writes" in output
        assert rows(spark, f"select id, p, seen from {table} order by id") == [
            (1, "a", 0),
            (2, "a", 0),
            (5, "a", 9),
            (6, "a", 5),
            (7, "b", 9),
            (10, "b", 0),
        ]
        # The hook ran pinned to vB, though v{vb + 1} had landed before it.
        with open(f"{logs_dir}/dbt.log") as log:
            assert f"from {table} VERSION AS OF {vb} where p = " in log.read()


class TestDeclareDefault:
    """Spark 4.1 refuses a subquery in DECLARE's DEFAULT: the pinned statement reaches Spark
    and is refused by it, not by the fence, and nothing is written."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"readings.sql": HIGH_MARK}

    def test_spark_refuses_the_subquery(self, project, spark, logs_dir):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.readings"
        vb = history(spark, table)[-1].version
        hook = "declare or replace variable readings_d bigint default (select max(id) from THIS)"
        results, _ = run(False, hook=hook, hi="readings_d")
        assert "INVALID_DEFAULT_VALUE.SUBQUERY_EXPRESSION" in results.results[0].message
        assert history(spark, table)[-1].version == vb and ours(history(spark, table)) == []
        with open(f"{logs_dir}/dbt.log") as log:
            assert f"(select max(id) from {table} VERSION AS OF {vb})" in log.read()

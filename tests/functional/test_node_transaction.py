"""The node is the transaction: one vB from the node's first read of its target (at compile
time if that is when it happens) to its last write, and a pre-hook that writes the target is
a step of the node, not a foreign writer. Every race here is another session (or Thrift
client) committing at a moment of the run, proven from DESCRIBE HISTORY."""

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.conftest import StockSparkProfile
from tests.functional.lakehouse import ForeignAt, history, ours, rows

# The watermark read at compile time, as many dbt projects do, to get a literal predicate.
COMPILE_TIME_WATERMARK = """
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append'),
          unique_key='id', fence_retries=var('retries', 0)) }}
{% set high = -1 %}
{% if execute and is_incremental() %}
  {% set high = run_query("select coalesce(max(id), -1) from " ~ this).columns[0].values()[0] %}
{% endif %}
select id from range(0, {{ var('hi', 3) }}) where id > {{ high }}
"""

# An idempotent reload: the pre-hook deletes the rows the model then inserts again.
RELOAD = """
{{ config(materialized='incremental', incremental_strategy=var('strategy', 'append_if_unchanged'),
          unique_key='id',
          pre_hook="{% if is_incremental() %}delete from {{ this }} where id >= 5{% endif %}",
          post_hook="alter table {{ this }} set tblproperties ('reloaded' = 'yes')") }}
select id, {{ var('round', 0) }} as round from range(0, 10)
{% if is_incremental() %} where id >= 5 {% endif %}
"""

# Reprocesses its newest rows: reads its high mark and deletes above it at compile time, then
# reads its own table again (after its DELETE, as stock does) to append from there.
REPROCESS = """
{{ config(materialized='incremental', incremental_strategy='append') }}
{% if execute and is_incremental() %}
  {% set hi = run_query("select max(id) from " ~ this).columns[0].values()[0] %}
  {% do run_query("delete from " ~ this ~ " where id > " ~ (hi - 3)) %}
{% endif %}
select id from range(0, {{ var('hi', 10) }})
{% if is_incremental() %} where id > (select max(id) from {{ this }}) {% endif %}
"""

# Deletes at compile time, then appends without reading its table: a read-modify-write all
# the same, fenced as append_if_unchanged.
DELETE_APPEND = """
{{ config(materialized='incremental', incremental_strategy='append') }}
{% if execute and is_incremental() %}
  {% do run_query("delete from " ~ this ~ " where id >= 3") %}
{% endif %}
select id from range(0, 6) {% if is_incremental() %} where id >= 3 {% endif %}
"""

DOUBLE_FIRED = "insert into {t} values (3), (4)"
COUNTS = "select id, count(*) from {t} group by id order by id"


def run(expect_pass: bool = True, **dbt_vars):
    return run_dbt(["run", "--vars", json.dumps(dbt_vars)], expect_pass=expect_pass)


class CompileTimeRace:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": COMPILE_TIME_WATERMARK}

    def race(self, project, spark, monkeypatch, expect_pass, **dbt_vars):
        """A double-fired job appends ids 3 and 4 after the node read its watermark (2) at
        compile time, before its materialization starts."""
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.events"
        vb = history(spark, table)[-1].version
        foreign = ForeignAt(monkeypatch, spark, "compiled", DOUBLE_FIRED.format(t=table))
        results = run(expect_pass, hi=5, **dbt_vars)
        after = [e for e in history(spark, table) if e.version > vb]
        assert foreign.fired == 1 and after[0].operation == "WRITE" and after[0].tag is None
        assert after[0].version == vb + 1  # landed after the compile-time read, as intended
        return table, vb, after, results


class TestStockCompileTimeWatermark(StockSparkProfile, CompileTimeRace):
    """The control: stock dbt-spark appends ids 3 and 4 a second time, with a green run."""

    def test_stock_duplicates_with_a_green_run(self, project, spark, monkeypatch):
        table, _, after, _ = self.race(project, spark, monkeypatch, True)
        assert [e.operation for e in after] == ["WRITE", "WRITE"]
        assert rows(spark, COUNTS.format(t=table)) == [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]


class TestFencedCompileTimeWatermark(CompileTimeRace):
    @pytest.mark.parametrize("strategy", ["append", "append_if_unchanged", "merge"])
    def test_refused_nothing_duplicated_and_a_rerun_is_exact(
        self, project, spark, monkeypatch, logs_dir, strategy
    ):
        table, vb, after, results = self.race(
            project, spark, monkeypatch, False, strategy=strategy, retries=2
        )
        assert [e.operation for e in after] == ["WRITE"]  # nothing of ours landed
        message = results.results[0].message
        assert f"read version (vB): {vb}" in message and f"v{vb + 1} WRITE" in message
        assert "never written: the table is as the other writer(s) left it." in message
        assert f"detected by: pre-check: v{vb + 1} WRITE: changed" in message
        assert "not retried (fence_retries: 2): this model read" in message
        assert "at compile time" in message and "fence_retries: N" not in message
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(5)]
        # The compile-time query that ran was pinned to vB (dbt's query log).
        with open(f"{logs_dir}/dbt.log") as log:
            assert f"from {table} VERSION AS OF {vb}" in log.read()

        monkeypatch.undo()
        run_dbt(["run", "--vars", json.dumps({"hi": 6, "strategy": strategy})])
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(6)]

    def test_an_append_that_read_its_target_at_compile_time_is_fenced(self, project, spark):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.events"
        vb = history(spark, table)[-1].version
        _, output = run_dbt_and_capture(["run", "--vars", json.dumps({"hi": 5})])
        assert "appends and read {{ this }} at compile time: running as append_if_unchanged" in (
            output
        )
        commit = history(spark, table)[-1]
        assert commit.version == vb + 1 and commit.tag["strategy"] == "append_if_unchanged"
        assert commit.tag["read_version"] == vb


class TestPreHookReload:
    @pytest.fixture(scope="class")
    def models(self):
        return {"reload.sql": RELOAD}

    def start(self, project, spark, strategy):
        run_dbt(["run", "--full-refresh", "--vars", json.dumps({"strategy": strategy})])
        table = f"{project.test_schema}.reload"
        return table, history(spark, table)[-1].version

    @pytest.mark.parametrize("strategy", ["append_if_unchanged", "merge"])
    def test_delete_then_insert_is_green_and_exact(self, project, spark, strategy):
        table, vb = self.start(project, spark, strategy)
        dbt_vars = json.dumps({"strategy": strategy, "round": 1})
        results, output = run_dbt_and_capture(["run", "--vars", dbt_vars])
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == [
            "DELETE",
            "WRITE" if strategy != "merge" else "MERGE",
            "SET TBLPROPERTIES",
        ]
        delete, write, post = after
        assert [e.tag["step"] for e in after] == ["pre_hook", "write", "post_hook"]
        with open(f"{project.project_root}/target/run_results.json") as f:
            invocation = json.load(f)["metadata"]["invocation_id"]
        assert {e.tag["invocation_id"] for e in after} == {invocation}
        assert write.read_version == delete.version  # the write continued from our DELETE
        assert results.results[0].adapter_response["read_version"] == vb
        assert results.results[0].adapter_response["commit_version"] == write.version
        # The log line and the response name the step's commit between vB and the write.
        step = f"v{delete.version} DELETE (pre_hook)"
        assert f"read v{vb} -> {step}, committed v{write.version}" in output
        assert results.results[0].adapter_response["steps"] == [step]
        assert rows(spark, f"select id, round from {table} order by id") == [
            (i, 0 if i < 5 else 1) for i in range(10)
        ]

    @pytest.mark.parametrize("strategy", ["append_if_unchanged", "merge"])
    def test_a_commit_before_the_delete_refuses_and_leaves_nothing(
        self, project, spark, monkeypatch, strategy
    ):
        table, vb = self.start(project, spark, strategy)
        ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (100, 9)")
        results = run(False, strategy=strategy, round=1)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, e.tag) for e in after] == [("WRITE", None)]  # only theirs
        message = results.results[0].message
        assert "never written: the table is as the other writer(s) left it." in message
        # The pre-hook's DELETE is arbitrary SQL: any data change before it conflicts.
        assert f"detected by: pre-check: v{vb + 1} WRITE: changed data, and this run's own" in (
            message
        )
        assert "fence_retries" not in message  # a refusal in a pre-hook is never retried
        assert rows(spark, f"select id, round from {table} order by id") == [
            *[(i, 0) for i in range(10)],
            (100, 9),
        ]

    @pytest.mark.parametrize("strategy", ["append_if_unchanged", "merge"])
    def test_a_commit_between_the_delete_and_the_write_is_reported_with_the_delete(
        self, project, spark, monkeypatch, strategy
    ):
        table, vb = self.start(project, spark, strategy)
        # Key 7: a row the reload writes (merge) in a table it must find unchanged (append).
        ForeignAt(monkeypatch, spark, "staging", f"insert into {table} values (7, 9)")
        results = run(False, strategy=strategy, round=1)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["DELETE", "WRITE"]
        delete, foreign = after
        assert delete.tag["step"] == "pre_hook" and foreign.tag is None
        assert ours(after) == []  # the write never ran
        message = results.results[0].message
        assert (
            f"this run's write: never written; this run's earlier steps v{delete.version} DELETE "
            f"(pre_hook) were NOT reverted (v{foreign.version} landed after it, so a RESTORE "
            f"would undo that too)"
        ) in message
        assert (
            f"`RESTORE TABLE {table} TO VERSION AS OF {vb}`; it also undoes "
            f"v{foreign.version} WRITE by other writers"
        ) in message
        assert "fix the table by hand" in message and "fence_retries" not in message
        # What the message says stands: our DELETE and their row, and nothing else.
        assert rows(spark, f"select id, round from {table} order by id") == [
            *[(i, 0) for i in range(5)],
            (7, 9),
        ]


class Reprocess:
    @pytest.fixture(scope="class")
    def models(self):
        return {"reprocess.sql": REPROCESS}

    def test_green_and_exact_three_times_in_a_row(self, project, spark):
        run_dbt(["run", "--full-refresh", "--select", "reprocess"])
        table = f"{project.test_schema}.reprocess"
        for hi in (12, 14, 16):
            vb = history(spark, table)[-1].version
            run_dbt(["run", "--select", "reprocess", "--vars", json.dumps({"hi": hi})])
            assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(hi)]
            self.check_history([e for e in history(spark, table) if e.version > vb])


class TestCompileTimeReprocess(Reprocess):
    """A write at compile time is a step of the node, like a pre-hook's: strict, tagged
    `compile`, and the node's later reads of its table see it."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"reprocess.sql": REPROCESS, "delete_append.sql": DELETE_APPEND}

    def test_a_compile_time_delete_makes_an_append_fenced(self, project, spark, monkeypatch):
        """Fenced as append_if_unchanged, though its SQL never reads its table. A row landing
        after our DELETE in what it deleted is no conflict: the outcome is the serial order
        "our run, then theirs", so the write commits over it and says so."""
        run_dbt(["run", "--full-refresh", "--select", "delete_append"])
        table = f"{project.test_schema}.delete_append"
        vb = history(spark, table)[-1].version
        ForeignAt(monkeypatch, spark, "compiled", f"insert into {table} values (4)")
        run_dbt(["run", "--select", "delete_append"])
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, (e.tag or {}).get("step")) for e in after] == [
            ("DELETE", "compile"),
            ("WRITE", None),
            ("WRITE", "write"),
        ]
        delete, foreign, write = after
        assert write.tag["strategy"] == "append_if_unchanged"
        assert write.tag["tolerated"] == [foreign.version]
        assert rows(spark, f"select id from {table} order by id") == [
            (0,),
            (1,),
            (2,),
            (3,),
            (4,),
            (4,),
            (5,),
        ]

    def test_an_earlier_unverified_commit_refuses_before_the_compile_time_delete(
        self, project, spark
    ):
        run_dbt(["run", "--full-refresh", "--select", "reprocess"])
        table = f"{project.test_schema}.reprocess"
        vb = history(spark, table)[-1].version
        # A run that died before its verdict: its write landed above a commit it never judged.
        crashed = json.dumps(
            {
                "dbt_fenced_spark": 1,
                "invocation_id": "crashed",
                "node": "model.test.reprocess",
                "strategy": "append_if_unchanged",
                "read_version": vb,
                "attempt": 1,
                "step": "write",
                "expected_version": vb,
            }
        )
        other = spark.newSession() if hasattr(spark, "newSession") else spark
        other.sql(f"insert into {table} values (100)")
        other.sql(f"set spark.databricks.delta.commitInfo.userMetadata=`{crashed}`")
        other.sql(f"insert into {table} values (101)")
        other.sql("reset spark.databricks.delta.commitInfo.userMetadata")
        results = run_dbt(["run", "--select", "reprocess", "--vars", '{"hi": 12}'], False)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE", "WRITE"]  # no DELETE of ours
        assert after[1].tag["invocation_id"] == "crashed"
        assert "an earlier run" in results.results[0].message

    @staticmethod
    def check_history(after):
        assert [e.operation for e in after] == ["DELETE", "WRITE"]
        delete, write = after
        assert [e.tag["step"] for e in after] == ["compile", "write"]
        assert write.read_version == delete.version  # the write continued from our DELETE

    def test_a_commit_after_the_delete_refuses_and_says_the_delete_stands(
        self, project, spark, monkeypatch
    ):
        run_dbt(["run", "--full-refresh", "--select", "reprocess"])
        table = f"{project.test_schema}.reprocess"
        vb = history(spark, table)[-1].version
        ForeignAt(monkeypatch, spark, "compiled", f"insert into {table} values (100)")
        results = run_dbt(["run", "--select", "reprocess", "--vars", '{"hi": 12}'], False)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["DELETE", "WRITE"]
        delete, foreign = after
        assert delete.tag["step"] == "compile" and foreign.tag is None
        message = results.results[0].message
        assert (
            f"this run's write: never written; this run's earlier steps v{delete.version} DELETE "
            f"(compile) were NOT reverted"
        ) in message
        # What the message says stands: our DELETE and their row.
        assert rows(spark, f"select id from {table} order by id") == [
            *[(i,) for i in range(7)],
            (100,),
        ]


class TestStockCompileTimeReprocess(StockSparkProfile, Reprocess):
    """The control: stock dbt-spark runs the reprocessing model right."""

    @staticmethod
    def check_history(after):
        assert [e.operation for e in after] == ["DELETE", "WRITE"]


class TestStockPreHookReload(StockSparkProfile):
    """The control: stock dbt-spark runs the reload correctly when nothing races it."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"reload.sql": RELOAD}

    def test_stock_reload_is_exact(self, project, spark):
        run_dbt(["run", "--full-refresh", "--vars", json.dumps({"strategy": "merge"})])
        run(round=1, strategy="merge")
        table = f"{project.test_schema}.reload"
        assert rows(spark, f"select id, round from {table} order by id") == [
            (i, 0 if i < 5 else 1) for i in range(10)
        ]


# The model reads its own table under another spelling, with a join hint that names it.
SPELLED = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select /*+ BROADCAST({{ this }}) */ s.id from range(0, {{ var('hi', 3) }}) s
{% if is_incremental() %}
left anti join {{ var('spelling') | replace('THIS', this | string) }} t on t.id = s.id
{% endif %}
"""


class TestOtherSpellingsOfTheTarget:
    """IDENTIFIER('schema.t') and delta.`<location>` are reads of the target: pinned on real
    Spark (the pinned SQL parses), and they make an `append` fenced."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"spelled.sql": SPELLED}

    @pytest.mark.parametrize("spelling", ["IDENTIFIER('THIS')", "delta.`LOCATION`"])
    def test_pinned_and_fenced(self, project, spark, monkeypatch, spelling):
        run_dbt(["run", "--full-refresh"])
        table = f"{project.test_schema}.spelled"
        [location] = [r.location for r in spark.sql(f"describe detail {table}").collect()]
        assert str(location).endswith("spelled")
        spelling = spelling.replace("LOCATION", str(location))
        vb = history(spark, table)[-1].version

        results = run(spelling=spelling, hi=5)
        commit = history(spark, table)[-1]
        assert commit.tag["strategy"] == "append_if_unchanged" and commit.tag["read_version"] == vb
        assert results.results[0].adapter_response["commit_version"] == vb + 1
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(5)]

        # And a commit after vB refuses it, as for any read of the target.
        ForeignAt(monkeypatch, spark, "vb", f"insert into {table} values (5)")
        results = run(False, spelling=spelling, hi=7)
        after = [e for e in history(spark, table) if e.version > commit.version]
        assert [(e.operation, e.tag) for e in after] == [("WRITE", None)]
        assert "never written" in results.results[0].message
        assert rows(spark, COUNTS.format(t=table)) == [(i, 1) for i in range(6)]

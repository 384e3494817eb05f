"""How statements reach the server. Over Thrift, metadata statements are answered inside the
ExecuteStatement call and others are polled (connections.py); a refusal reads the same either
way. Runs on every profile: the session and Connect have one path, and must agree too."""

import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture
from dbt_common.exceptions import DbtRuntimeError

from tests.functional.lakehouse import (
    dead_run_merge,
    history,
    long_spark_job,
    response_of,
    rows,
)
from tests.harness.writer import ForeignWriter

MISSING = "fenced_no_such_schema.fenced_no_such_table"


class TestARefusalReadsTheSameAnsweredAtOnceOrPolled:
    def refusal(self, adapter, sql: str) -> list[str]:
        with adapter.connection_named("_statements"), pytest.raises(DbtRuntimeError) as refused:
            adapter.execute(sql)
        return str(refused.value).splitlines()

    def test_describe_and_select_of_a_missing_table(self, project):
        described = self.refusal(project.adapter, f"describe extended {MISSING}")  # at once
        selected = self.refusal(project.adapter, f"select * from {MISSING}")  # polled
        for lines in (described, selected):
            assert any("TABLE_OR_VIEW_NOT_FOUND" in line for line in lines), lines

        def framing(lines: list[str]) -> list[str]:
            # dbt's wrapping above Spark's own words
            return lines[: next(i for i, line in enumerate(lines) if "TABLE_OR_VIEW" in line)]

        assert framing(described) == framing(selected)


# A post-hook runs after the write, in the node's session: it fails the node when the fence's
# staging view (`<model>__fence_<hex>`) is still there, and logs how many it saw.
STAGING_GONE = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          on_schema_change='append_new_columns', post_hook="{{ staging_views_left() }}") }}
select id, {{ var('round', 0) }} as round from range(1, 4)
"""

# on_schema_change 'ignore' (the default): the model SQL is the MERGE's own source, no view.
NO_STAGING = STAGING_GONE.replace("on_schema_change='append_new_columns', ", "")

STAGING_VIEWS_LEFT = """
{% macro staging_views_left() %}
  {%- if execute and is_incremental() -%}
    {%- set views = run_query("show views like '" ~ this.identifier ~ "__fence_*'") -%}
    {%- set left = [] -%}
    {%- for row in views.rows if row[2] -%}{%- do left.append(row[1]) -%}{%- endfor -%}
    {{ log("staging views left: " ~ left | length, info=true) }}
    {%- if left -%}
      {{ exceptions.raise_compiler_error("staging view still in the session: " ~ left) }}
    {%- endif -%}
  {%- endif -%}
{% endmacro %}
"""


class TestTheStagingViewIsDroppedAfterTheWrite:
    """Over Thrift, a session that still holds a temp view closes 45 ms slower (the server
    analyses the view's query again to uncache it): the fence drops its own first, as on the
    session. A Connect session keeps it until it serves the next node (connect.clear)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"staged.sql": STAGING_GONE, "inline.sql": NO_STAGING}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"staging_views_left.sql": STAGING_VIEWS_LEFT}

    def test_no_staging_view_is_made_where_the_model_sql_is_the_source(self, project, spark):
        run_dbt(["run", "--select", "inline"])
        results = run_dbt(["run", "--select", "inline", "--vars", '{"round": 1}'])
        assert results.results[0].adapter_response["fence_outcome"] == "committed"
        assert rows(spark, f"select distinct round from {project.test_schema}.inline") == [(1,)]

    def test_no_staging_view_after_a_fenced_merge(self, project, spark, dbt_profile_name):
        run_dbt(["run", "--select", "staged"])
        if dbt_profile_name == "connect":
            # connect.clear drops it when the session is reused; the post-hook sees it still.
            failed = run_dbt(
                ["run", "--select", "staged", "--vars", '{"round": 1}'], expect_pass=False
            )
            assert "staging view still in the session" in str(failed.results[0].message)
            return
        results = run_dbt(["run", "--select", "staged", "--vars", '{"round": 1}'])
        assert results.results[0].adapter_response["fence_outcome"] == "committed"
        assert rows(spark, f"select distinct round from {project.test_schema}.staged") == [(1,)]


# A model leaves a conf and a temp view in its session (pre-hooks); the next model fails if it
# finds either. Every dbt connection starts as a new session would, whichever method.
LEAVES = """
{{ config(materialized='table', pre_hook=["set spark.sql.shuffle.partitions=7",
          "create or replace temporary view leaked_view as select 1 as x"]) }}
select 1 as id
"""

FINDS = """
{{ config(materialized='table', post_hook="{{ nothing_leaked() }}") }}
select * from {{ ref('leaves') }}
"""

NOTHING_LEAKED = """
{% macro nothing_leaked() %}
  {%- if execute -%}
    {%- set partitions = run_query("set spark.sql.shuffle.partitions").rows[0][1] -%}
    {%- set views = run_query("show views like 'leaked_view'") -%}
    {%- set left = [] -%}
    {%- for row in views.rows if row[2] -%}{%- do left.append(row[1]) -%}{%- endfor -%}
    {{ log("shuffle partitions: " ~ partitions ~ "; temp views left: " ~ left, info=true) }}
    {%- if partitions == '7' or left -%}
      {{ exceptions.raise_compiler_error("the last model's session state reached this one") }}
    {%- endif -%}
  {%- endif -%}
{% endmacro %}
"""

FENCED_MERGE = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select id, {{ var('round', 0) }} as round from range(1, 4)
"""


class TestANodeStartsWithANewSessionsState:
    """Over Thrift a session is kept for the next node only if what ran in it left nothing
    (thrift.py); a model's SET and temp view close it, as dbt-spark closes every one."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"leaves.sql": LEAVES, "finds.sql": FINDS}

    @pytest.fixture(scope="class")
    def macros(self):
        return {"nothing_leaked.sql": NOTHING_LEAKED}

    def test_a_models_set_and_temp_view_never_reach_the_next(self, project):
        results, logs = run_dbt_and_capture(["--debug", "run"])
        assert [r.status for r in results] == ["success", "success"]
        assert "temp views left: []" in logs
        assert "shuffle partitions: 7" not in logs


class TestAKeptSessionServesTheNextFencedNode:
    """Two fenced merges in a row over Thrift: the second is served the first one's session,
    in which Delta has set lastCommitVersionInSession to the first one's commit. Each verdict
    still names its own commit, as the log has it."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"first.sql": FENCED_MERGE, "second.sql": FENCED_MERGE + "-- {{ ref('first') }}\n"}

    def test_each_verdict_names_its_own_commit(self, project, spark, dbt_profile_name):
        run_dbt(["run"])
        results, logs = run_dbt_and_capture(["--debug", "run", "--vars", '{"round": 1}'])
        if dbt_profile_name == "thrift":
            assert re.search(r"Thrift session reused for connection 'model\.\w+\.second'", logs)
        for name in ("first", "second"):
            response = response_of(project, name)
            assert response["fence_outcome"] == "committed", response
            newest = history(spark, f"{project.test_schema}.{name}")[-1]
            assert newest.operation == "MERGE"
            assert newest.tag["node"].endswith(f".{name}")
            assert response["commit_version"] == newest.version
            assert rows(spark, f"select distinct round from {project.test_schema}.{name}") == [(1,)]


STRICT_APPEND = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select {{ var('round', 0) }} as round
"""

# Not fenced: a table, whose pre-hook reads the confs the fence's last write set and whose
# CREATE OR REPLACE commits in the session the strict appends before it left.
READS_THE_CONFS = """
{{ config(materialized='table', pre_hook="{{ confs_as_left() }}") }}
select 1 as id -- {{ ref('strict_b') }}
"""

CONFS_AS_LEFT = """
{% macro confs_as_left() %}
  {%- if execute -%}
    {%- set attempts = run_query("set spark.databricks.delta.maxCommitAttempts").rows[0][1] -%}
    {%- set label = run_query("set spark.databricks.delta.commitInfo.userMetadata").rows[0][1] -%}
    {{ log("maxCommitAttempts: " ~ attempts ~ "; userMetadata: " ~ label, info=true) }}
  {%- endif -%}
{% endmacro %}
"""


class TestTheFencesResetsWaitForAnotherStatement:
    """Over Thrift the RESETs of the fence's commit tag and maxCommitAttempts after its write
    wait for the session's next statement that is not the fence's own (thrift.Leftovers.deferred):
    a later strict append in the same session finds maxCommitAttempts still 0 and sends no SET
    of it; a model after them reads the server's defaults, and its commit carries no tag."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "strict_a.sql": STRICT_APPEND,
            "strict_b.sql": STRICT_APPEND + "-- {{ ref('strict_a') }}\n",
            "reads_the_confs.sql": READS_THE_CONFS,
        }

    @pytest.fixture(scope="class")
    def macros(self):
        return {"confs_as_left.sql": CONFS_AS_LEFT}

    def test_a_later_statement_sees_the_servers_defaults(self, project, spark, dbt_profile_name):
        run_dbt(["run"])
        results, logs = run_dbt_and_capture(["--debug", "run", "--vars", '{"round": 1}'])
        assert [r.status for r in results] == ["success"] * 3
        # Delta's default, and no label: neither of the fence's values is left.
        assert "maxCommitAttempts: 10000000; userMetadata: <undefined>" in logs
        for name in ("strict_a", "strict_b"):
            response = response_of(project, name)
            newest = history(spark, f"{project.test_schema}.{name}")[-1]
            assert response["fence_outcome"] == "committed", response
            assert (newest.operation, newest.tag["step"]) == ("WRITE", "write")
            assert newest.tag["node"] == f"model.test.{name}"
            assert response["commit_version"] == newest.version
        table = history(spark, f"{project.test_schema}.reads_the_confs")[-1]
        assert table.operation == "CREATE OR REPLACE TABLE AS SELECT"
        assert table.user_metadata is None
        if dbt_profile_name != "thrift":
            return
        # The same session served all three, in order: strict_b sent no SET of
        # maxCommitAttempts, neither appends a RESET, and both went out in the table's node.
        for name in ("strict_b", "reads_the_confs"):
            assert re.search(rf"Thrift session reused for connection 'model\.test\.{name}'", logs)
        appends = logs[logs.index("START sql incremental model") : logs.index("START sql table")]
        b = appends[appends.index("START sql incremental model", 1) :]
        assert "spark.databricks.delta.maxCommitAttempts still holds `0`" in b
        assert "SET spark.databricks.delta.maxCommitAttempts=`0`" not in b
        for key in ("maxCommitAttempts", "commitInfo.userMetadata"):
            assert f"RESET spark.databricks.delta.{key} waits" in appends
            assert f": RESET spark.databricks.delta.{key}\n" not in appends
            reads = logs[logs.index("START sql table") :]
            assert f"RESET spark.databricks.delta.{key}, left by the fence's last write" in reads


# A per-row predicate that is always true and sleeps inside the write's own tasks
# (test_strict_races.py), on the second of two strict appends in one run.
SLOW_STRICT_APPEND = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select {{ var('round', 0) }} as round -- {{ ref('strict_first') }}
where reflect('java.lang.Thread', 'sleep', cast({{ var('slow_ms', 0) }} as bigint)) is not null
"""


class TestAStrictWriteAfterAnotherInItsSessionIsStillStrict:
    """The second of two strict appends in one session sends no SET of maxCommitAttempts=0
    over Thrift (its RESET waited, TestTheFencesResetsWaitForAnotherStatement): a foreign
    blind INSERT that lands while its write runs is refused by Delta itself, as under a SET of
    its own, and nothing of ours is written (no commit, so no revert either)."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"strict_first.sql": STRICT_APPEND, "strict_slow.sql": SLOW_STRICT_APPEND}

    def test_a_commit_during_the_write_is_refused_by_delta(self, project, spark, dbt_profile_name):
        run_dbt(["run"])
        table = f"{project.test_schema}.strict_slow"
        vb = history(spark, table)[-1].version
        writer = ForeignWriter(spark)
        # 3 s of a job: the 5 s write, not a statement before it that a loaded machine slows
        writer.when(long_spark_job(spark, 3.0), f"insert into {table} values (100)")
        results, logs = run_dbt_and_capture(
            ["--debug", "run", "--vars", '{"round": 1, "slow_ms": 5000}'], expect_pass=False
        )
        writer.join()
        statuses = {r.node.name: (r.status, r.message) for r in results}
        assert statuses["strict_first"][0] == "success"
        assert statuses["strict_slow"][0] == "error"
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, e.tag) for e in after] == [("WRITE", None)]  # theirs only
        message = statuses["strict_slow"][1]
        assert "DELTA_MAX_COMMIT_RETRIES_EXCEEDED" in message  # as test_strict_races.py
        assert "never written" in message
        assert rows(spark, f"select round from {table} order by round") == [(0,), (100,)]
        if dbt_profile_name == "thrift":
            first = logs.index("START sql incremental model")
            slow = logs[logs.index("START sql incremental model", first + 1) :]
            assert "spark.databricks.delta.maxCommitAttempts still holds `0`" in slow


# Reads its table at compile time, then deletes from it there (a step of the run): vB is
# captured at the read, and the DELETE is the node's first commit.
COMPILE_TIME_STEP = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
{% if execute and is_incremental() %}
  {% do run_query("select count(*) from " ~ this) %}
  {% do run_query("delete from " ~ this ~ " where id = 3") %}
{% endif %}
select id, {{ var('round', 0) }} as round from range(1, 4)
"""


class TestTheLastRunsVerifiedCommitSparesTheCapturesRead:
    """Over SQL the capture reads the newest commits (a Spark job) to find an earlier run of
    the node that died before its verdict. When the node's last run committed vN, the fence
    verified it, and vN is still the newest version, that run checked them already: over
    Thrift and Connect one EXPLAIN of the commit files says so and no file is read
    (SqlLog.settled). Any
    commit after vN is read, and a dead run's is found as before: at the capture, or at a
    compile-time read, before a compile-time DELETE."""

    NAMES = ("settled", "settled_at_compile")

    @staticmethod
    def before_first_commit(logs: str, name: str) -> str:
        """The node's statements in a --debug run's log, up to its first write to its table."""
        parts = re.split(r"On (model\.test\.\w+): ", logs)
        ours = [
            text
            for node, text in zip(parts[1::2], parts[2::2], strict=True)
            if node == f"model.test.{name}"
        ]
        writes = re.compile(
            r"^\s*(/\*.*?\*/\s*)?(-- back compat.*\n\s*)?(delete from|merge into)", re.I | re.S
        )
        first = next(i for i, text in enumerate(ours) if writes.match(text))
        return "".join(ours[:first])

    @pytest.fixture(scope="class")
    def models(self):
        return {"settled.sql": FENCED_MERGE, "settled_at_compile.sql": COMPILE_TIME_STEP}

    def test_a_verified_commit_still_newest_is_not_read_again(
        self, project, spark, dbt_profile_name
    ):
        run_dbt(["run"])
        run_dbt(["run", "--vars", '{"round": 1}'])
        first = {name: response_of(project, name) for name in self.NAMES}
        _, logs = run_dbt_and_capture(["--debug", "run", "--vars", '{"round": 2}'])
        for name in self.NAMES:
            table = f"{project.test_schema}.{name}"
            where = [r[1] for r in rows(spark, f"describe extended {table}") if r[0] == "Location"]
            if dbt_profile_name == "session":
                assert "table_location" not in first[name]  # the session reads the log itself
            else:
                assert [first[name]["table_location"]] == where
            response = response_of(project, name)
            newest = history(spark, table)[-1]
            assert response["fence_outcome"] == "committed"
            assert response["commit_version"] == newest.version and newest.tag["step"] == "write"
            vn = first[name]["commit_version"]
            assert response["read_version"] == vn
            # Until the node's first commit: the capture's EXPLAIN that finds vN still newest,
            # and the pre-check's (over SQL; the session reads the log's files itself), unless
            # the write followed the capture with nothing in between, as its log line says.
            before = self.before_first_commit(logs, name)
            probe = f"/{vn:020d}.json,/{vn + 1:020d}.json,/{vn + 1:020d}.json,"
            skipped = "no pre-check: the capture read" in before
            probes = 0 if dbt_profile_name == "session" else 1 if skipped else 2
            assert before.count(probe) == probes, (name, before.count(probe))
            commit_reads = before.count("regexp_extract(decode(content")
            assert commit_reads == 0, f"{name}'s capture read commit files"
        assert rows(spark, f"select distinct round from {project.test_schema}.settled") == [(2,)]

    def test_a_dead_runs_commit_after_it_is_found(self, project, spark):
        run_dbt(["run", "--vars", '{"round": 3}'])
        landed = {}
        for name in self.NAMES:
            table = f"{project.test_schema}.{name}"
            vb = history(spark, table)[-1].version
            assert response_of(project, name)["commit_version"] == vb
            # A dead run's MERGE on top of a foreign commit it never judged.
            ForeignWriter(spark).sql(f"update {table} set round = 30 where id = 1")
            dead_run_merge(
                spark,
                f"model.test.{name}",
                vb,
                f"merge into {table} t using (select 2 as id, 31 as round) s on s.id = t.id "
                "when matched then update set *",
            )
            landed[name] = [e for e in history(spark, table) if e.version > vb]
            assert [(e.operation, e.tag and e.tag["step"]) for e in landed[name]] == [
                ("UPDATE", None),
                ("MERGE", "write"),
            ]
        results = run_dbt(["run", "--vars", '{"round": 4}'], expect_pass=False)
        response = response_of(project, "settled")
        assert (response["fence_outcome"], response["unresolved_version"]) == (
            "earlier_run_unresolved",
            landed["settled"][1].version,
        )
        [compiled] = [r for r in results.results if r.node.name == "settled_at_compile"]
        assert "an earlier run" in compiled.message  # before its compile-time DELETE
        for name in self.NAMES:
            table = f"{project.test_schema}.{name}"
            assert history(spark, table)[-1].version == landed[name][1].version  # nothing ours
            assert rows(spark, f"select id, round from {table} order by id") == [
                (1, 30),
                (2, 31),
                (3, 3),
            ]

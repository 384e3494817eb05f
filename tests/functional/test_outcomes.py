"""After the write statement, the outcome comes from the log, never from the exception: a write
that committed and then failed is reported committed, and its re-run does not double it."""

import json
import logging
import os
import re
import shutil

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.fenced_spark import nodes
from tests.functional.lakehouse import (
    ForeignAroundWrite,
    ForeignWriter,
    history,
    ours,
    response_of,
    rows,
)

APPENDED = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged') }}
select id from range({{ var('lo', 0) }}, {{ var('hi', 3) }})
"""


class TestPostCommitHookFailure:
    @pytest.fixture(scope="class")
    def models(self):
        return {"manifested.sql": APPENDED}

    def test_a_failed_post_commit_hook_is_reported_as_committed(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.manifested"
        spark.sql(
            f"alter table {table} set tblproperties "
            "('delta.compatibility.symlinkFormatManifest.enabled' = 'true')"
        )
        location = spark.sql(f"describe detail {table}").collect()[0]["location"]
        manifest = os.path.join(location.removeprefix("file:"), "_symlink_format_manifest")
        # A file where Delta's hook makes its directory: the commit lands, then the hook fails.
        shutil.rmtree(manifest, ignore_errors=True)
        with open(manifest, "w") as blocker:
            blocker.write("not a directory")
        vb = history(spark, table)[-1].version

        results = run_dbt(["run", "--vars", json.dumps({"lo": 3, "hi": 5})], expect_pass=False)

        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["WRITE"] and ours(after) == after
        message = results.results[0].message
        assert f"the write committed as v{after[0].version} (verified: based on v{vb})" in message
        assert "DELTA_POST_COMMIT_HOOK_FAILED" in message or "manifest" in message.lower()
        assert f"committed as v{after[0].version}; it stands" in message
        assert response_of(project, "manifested") == {
            "_message": "APPEND_IF_UNCHANGED committed_then_failed",
            "fence_outcome": "committed_then_failed",
            "read_version": vb,
            "commit_version": after[0].version,
        }
        assert rows(spark, f"select id from {table} order by id") == [(i,) for i in range(5)]


# Each reads its table: the append where its batch is not in yet, the merge through its key.
WATCHED = """
{{ config(materialized='incremental', incremental_strategy='append') }}
select '{{ var("ds") }}' as ds, id from range(3)
{% if is_incremental() %}
where not exists (select 1 from {{ this }} t where t.ds = '{{ var("ds") }}')
{% endif %}
"""
KEYED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select '{{ var("ds") }}' as ds, id from range(3)
"""


class TestGreenVerdictHoldsAtTheNextRun:
    """A commit that lands after the pre-check, before the write reads the table, is judged by
    verification; when it does not conflict the run is green, and the next run, which finds
    that commit below ours, judges it by the scope our tag records: still no conflict."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"watched.sql": WATCHED, "keyed.sql": KEYED}

    @pytest.mark.parametrize("model, foreign", [("watched", "('other', 9)"), ("keyed", "('x', 7)")])
    def test_the_next_run_does_not_refuse_a_green_runs_commit(
        self, project, spark, monkeypatch, model, foreign
    ):
        table = f"{project.test_schema}.{model}"
        run_dbt(["run", "-s", model, "--vars", json.dumps({"ds": "d1"})])
        writer = ForeignWriter(spark)
        runners = []

        def runner(connections, described=None):
            runners.append(
                ForeignAroundWrite(
                    connections,
                    writer,
                    lambda _: f"insert into {table} values {foreign}",
                    times=1,
                    described=described,
                )
            )
            return runners[-1]

        monkeypatch.setattr(nodes, "FenceSql", runner)
        run_dbt(["run", "-s", model, "--vars", json.dumps({"ds": "d2"})])
        monkeypatch.undo()
        assert sum(r.fired for r in runners) == 1
        entries = history(spark, table)
        foreign_commit, our_write = entries[-2], entries[-1]
        assert foreign_commit.tag is None and our_write.tag["step"] == "write"
        assert our_write.read_version == foreign_commit.version  # read above the foreign commit
        response = response_of(project, model)
        assert (response["fence_outcome"], response["commit_version"]) == (
            "committed",
            our_write.version,
        )
        [tolerated] = response["tolerated"]
        assert tolerated.startswith(f"v{foreign_commit.version} WRITE: ")

        after = run_dbt(["run", "-s", model, "--vars", json.dumps({"ds": "d3"})])
        assert after.results[0].adapter_response["fence_outcome"] == "committed"
        expected = {
            "watched": [("d1", 3), ("d2", 3), ("d3", 3), ("other", 1)],
            "keyed": [("d3", 3), ("x", 1)],
        }
        assert (
            rows(spark, f"select ds, count(*) from {table} group by ds order by ds")
            == (expected[model])
        )


UNFENCED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id',
          fenced=false) }}
select id, '{{ var("ds", "d1") }}' as ds from range(3)
"""


class TestUnfencedSaysSo:
    @pytest.fixture(scope="class")
    def models(self):
        return {"unfenced.sql": UNFENCED}

    def test_an_unfenced_run_says_so_and_commits_untagged(self, project, spark):
        table = f"{project.test_schema}.unfenced"
        run_dbt(["run"])
        _, output = run_dbt_and_capture(["run", "--vars", json.dumps({"ds": "d2"})])
        assert (
            f"fenced_spark: {table} runs unfenced (fenced: false): dbt-spark's merge, with no "
            "check of the version it read"
        ) in output
        merge = history(spark, table)[-1]
        assert merge.operation == "MERGE" and merge.tag is None
        assert rows(spark, f"select distinct ds from {table}") == [("d2",)]


READS_ITSELF = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select id, '{{ var("ds", "d1") }}' as ds from range(3)
{% if is_incremental() %}
where id >= (select count(*) - 3 from {{ this }})
{% endif %}
"""


class TestTargetRunHoldsWhatRan:
    @pytest.fixture(scope="class")
    def models(self):
        return {"pinned.sql": READS_ITSELF}

    def test_the_run_file_holds_the_write_with_the_pinned_model_sql(self, project, spark):
        table = f"{project.test_schema}.pinned"
        run_dbt(["run"])
        vb = history(spark, table)[-1].version
        run_dbt(["run", "--vars", json.dumps({"ds": "d2"})])
        path = os.path.join(project.project_root, "target", "run", "test", "models", "pinned.sql")
        with open(path) as f:
            ran = f.read()
        assert f"-- dbt-fenced-spark: fenced merge into {table} (model.test.pinned)" in ran
        assert f"VERSION AS OF {vb}" in ran  # the model SQL as it ran, pinned
        # on_schema_change 'ignore': the model SQL is the write's source, no view is made
        assert "temporary view" not in ran.lower()
        assert f"merge into {table}" in ran.lower()
        assert re.search(r"using \(\n.*VERSION AS OF \d+.*\n\) as DBT_INTERNAL_SOURCE", ran, re.S)
        assert history(spark, table)[-1].operation == "MERGE"


class TestSparkErrorsStayOffTheConsole:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "broken.sql": "{{ config(materialized='table') }}\n"
            "select cast(raise_error('the model failed') as int) as id"
        }

    @pytest.mark.skip_profile(
        "thrift",
        "connect",
        reason="the session's own pyspark logs them; test_connect.py checks the client's",
    )
    def test_a_failing_model_prints_no_spark_log_line(self, project, capfd):
        capfd.readouterr()
        result = run_dbt(["run"], expect_pass=False).results[0]
        assert "TASK_WRITE_FAILED" in result.message
        console = capfd.readouterr()
        assert "SQLQueryContextLogger" not in console.out + console.err
        handlers = logging.getLogger("SQLQueryContextLogger").handlers
        files = [h for h in handlers if isinstance(h, logging.FileHandler)]
        assert files and not [h for h in handlers if type(h) is logging.StreamHandler]
        with open(files[-1].baseFilename) as log:  # the session's logs/spark.log
            assert "TASK_WRITE_FAILED" in log.read().rsplit("SQLQueryContextLogger", 1)[-1]


RELOAD_OUTSIDE = """
{{ config(materialized='incremental', incremental_strategy='replace_where',
          incremental_predicates=['id >= 2'],
          pre_hook="{% if is_incremental() %}delete from {{ this }} where id >= 5{% endif %}") }}
select id from range({{ var('lo', 0) }}, 10)
"""


class TestDeltaRefusalAfterOurStep:
    """Delta refuses the write (a row outside replace_where) after the pre-hook's DELETE
    committed: the message and the response say the DELETE stands, as the table shows."""

    @pytest.fixture(scope="class")
    def models(self):
        return {"reload_outside.sql": RELOAD_OUTSIDE}

    def test_the_step_that_stands_is_named(self, project, spark):
        table = f"{project.test_schema}.reload_outside"
        run_dbt(["run"])
        vb = history(spark, table)[-1].version
        results = run_dbt(["run", "--vars", json.dumps({"lo": 1})], expect_pass=False)
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, e.tag and e.tag["step"]) for e in after] == [("DELETE", "pre_hook")]
        message = results.results[0].message
        step = f"v{after[0].version} DELETE (pre_hook)"
        assert f"its write was never written; this run's earlier steps stand: {step}" in message
        assert "nothing was written" not in message and "DELTA_REPLACE_WHERE" in message
        response = response_of(project, "reload_outside")
        assert (response["steps"], response["standing"]) == ([step], [after[0].version])
        assert rows(spark, f"select count(*) from {table}") == [(5,)]  # the DELETE stands

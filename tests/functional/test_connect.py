"""`method: connect`: what Spark Connect itself must get right, on a real Connect server.

The fence's races over Connect are the same tests as over thrift (test_merge_races.py,
test_strict_races.py, test_server_races.py run with --profile connect; so do the bad-input
tests, a non-Delta target among them); here: one Connect session per dbt thread, `dbt debug`,
and the errors a user sees.
"""

import json
import os
import subprocess
import sys

import pytest
import yaml
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.lakehouse import execute_spans, history, max_concurrent, rows
from tests.harness.servers import free_port

pytestmark = pytest.mark.skip_profile(
    "session", "thrift", reason="Spark Connect's own behaviour: run with --profile connect"
)

# Each model sets a session conf and a temp view of one shared name, sleeps so the four
# threads overlap, then reads both back: another thread's value would show here.
ISOLATED = """
{{{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='id',
    pre_hook=[
        "set spark.fenced_test.who = {name}",
        "create or replace temporary view whose_view as select '{name}' as who",
    ],
) }}}}
select 1 as id, '{name}' as me, (select who from whose_view) as view_says,
  '${{spark.fenced_test.who}}' as conf_says,
  reflect('java.lang.Thread', 'sleep', cast(1500 as bigint)) as slept,
  {{{{ var('run', 0) }}}} as run
"""

NAMES = ("m1", "m2", "m3", "m4")


class TestFourThreadsFourSessions:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, spark_server):
        return spark_server.profile(threads=4)

    @pytest.fixture(scope="class")
    def models(self):
        return {f"{name}.sql": ISOLATED.format(name=name) for name in NAMES}

    def test_confs_views_and_fence_tags_stay_in_their_thread(self, project, spark):
        run_dbt(["run"])
        results = run_dbt(["run", "--vars", json.dumps({"run": 1})])  # fenced merges
        # A conf or view leaking between threads shows only if they ran at once: all four did.
        assert max_concurrent(execute_spans(results).values()) == 4
        for name in NAMES:
            table = f"{project.test_schema}.{name}"
            assert rows(spark, f"select me, view_says, conf_says, run from {table}") == [
                (name, name, name, 1)
            ]
            (merge,) = [e for e in history(spark, table) if e.operation == "MERGE"]
            assert merge.tag and merge.tag["node"] == f"model.test.{name}"
            assert merge.tag["strategy"] == "merge"


class TestDebug:
    def test_debug_reports_spark_and_delta_versions(self, project):
        _, output = run_dbt_and_capture(["debug"])
        assert "All checks passed!" in output
        assert "Spark 4.1." in output and "Delta Lake 4.4." in output
        assert "method: connect" in output


class TestErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "missing_column.sql": "select no_such_column from values (1) as t(id)",
            "ok.sql": "select 1 as id",
        }

    def test_server_error_is_sparks_words_without_grpc_noise(self, project, capfd):
        results, output = run_dbt_and_capture(
            ["run", "--select", "missing_column"], expect_pass=False
        )
        message = results.results[0].message
        assert "UNRESOLVED_COLUMN" in message and "no_such_column" in message
        captured = capfd.readouterr()
        for noise in ("JVM stacktrace", "SQLQueryContextLogger", "_MultiThreadedRendezvous"):
            assert noise not in message and noise not in output
            assert noise not in captured.err and noise not in captured.out

    def test_server_down_is_one_clear_error_after_retries(self, project, spark_server):
        down = f"sc://127.0.0.1:{free_port()}"
        profile = spark_server.profile(host=down, connect_retries=1, connect_timeout=1)
        rc, output = self.dbt_with(project, profile)
        assert rc != 0
        assert f"Could not reach the Spark Connect server at {down} after 2 attempt(s)" in output
        assert "retrying in 1s (1 of 1)" in output
        for noise in ("debug_error_string", "_MultiThreadedRendezvous", "RETRIES_EXCEEDED"):
            assert noise not in output

    def test_url_without_scheme_names_the_key(self, project, spark_server):
        profile = spark_server.profile(host=f"127.0.0.1:{spark_server.port}")
        rc, output = self.dbt_with(project, profile)
        assert rc != 0
        assert "method: connect takes Spark Connect's URL as `host`" in output
        assert f"not '127.0.0.1:{spark_server.port}'" in output

    @staticmethod
    def dbt_with(project, target: dict) -> tuple[int, str]:
        """`dbt run` in its own process with this target: its whole stdout and stderr."""
        folder = os.path.join(project.project_root, "other_profiles")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "profiles.yml"), "w") as f:
            yaml.safe_dump({"test": {"target": "default", "outputs": {"default": target}}}, f)
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        done = subprocess.run(
            [dbt, "run", "--select", "ok", "--project-dir", str(project.project_root)]
            + ["--profiles-dir", folder, "--log-path", os.path.join(folder, "logs")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        return done.returncode, done.stdout + done.stderr

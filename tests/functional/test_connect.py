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
import threading
import time

import pytest
import yaml
from dbt.tests.util import run_dbt, run_dbt_and_capture

from tests.functional.lakehouse import execute_spans, history, max_concurrent, ours, rows
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


# A node's session serves a later node (connect.py): it must reach that node as a new session
# would. `leaves` sets confs and makes temp views (CACHE TABLE's, and one whose name only matches
# under the case rule it set); `finds`, run after it on the one thread, reads them at compile
# time.
LEAVES = """
{{ config(materialized='table', pre_hook=[
    "set spark.fenced_test.who = leaves",
    "create or replace temporary view whose_view as select 'leaves' as who",
    "cache table cached_view as select 1 as x",
    "set spark.sql.caseSensitive = true",
    "create or replace temporary view Cased_View as select 1 as x",
]) }}
select 1 as id
"""
FINDS = """
-- depends_on: {{ ref('leaves') }}
{%- set seen = {'conf': '', 'views': []} -%}
{%- if execute -%}
  {%- do seen.update({'conf': run_query('set spark.fenced_test.who').rows[0][1]}) -%}
  {%- for row in run_query('show views in global_temp').rows if not row[0] -%}
    {%- do seen['views'].append(row[1]) -%}
  {%- endfor -%}
{%- endif %}
select '{{ seen.conf }}' as conf_says, '{{ seen.views | join(",") }}' as temp_views
"""
# What a RESET does not undo ends the session with its node: the next node starts in `default`.
WHERE_AM_I = """
-- depends_on: {{{{ ref('{after}') }}}}
select '{{{{ run_query("select current_database()").rows[0][0] if execute else "" }}}}' as db
"""
MOVES = """
{{ config(materialized='table', pre_hook="use {{ target.schema }}") }}
select 1 as id
"""
MOVES_IN_PYTHON = """
def model(dbt, session):
    dbt.config(materialized="table")
    dbt.ref("after_use")
    session.sql(f"use {dbt.this.schema}")
    return session.sql("select 1 as id")
"""


class TestTheNextNodesSessionIsAsNew:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, spark_server):
        return spark_server.profile(threads=1)

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "leaves.sql": LEAVES,
            "finds.sql": FINDS,
            "moves.sql": MOVES,
            "after_use.sql": WHERE_AM_I.format(after="moves"),
            "moves_in_python.py": MOVES_IN_PYTHON,
            "after_python.sql": WHERE_AM_I.format(after="moves_in_python"),
        }

    def test_confs_and_temp_views_do_not_reach_the_next_node(self, project, spark):
        _, output = run_dbt_and_capture(["--debug", "run", "--select", "leaves", "finds"])
        # One thread: the session `leaves` ran in (and was kept after) serves `finds`.
        assert "Spark Connect session reused for connection 'model.test.finds'" in output
        assert rows(spark, f"select conf_says, temp_views from {project.test_schema}.finds") == [
            ("<undefined>", "")
        ]

    def test_a_use_in_sql_or_python_ends_the_session_with_its_node(self, project, spark):
        run_dbt(["run", "--select", "moves", "after_use", "moves_in_python", "after_python"])
        assert project.test_schema != "default"
        for model in ("after_use", "after_python"):
            assert rows(spark, f"select db from {project.test_schema}.{model}") == [("default",)]


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


# The watermark append: a re-run after a batch that committed must add nothing.
WATERMARK = """
{{ config(materialized='incremental', incremental_strategy='append_if_unchanged',
          tblproperties={'delta.checkpointInterval': '1',
                         'delta.compatibility.symlinkFormatManifest.enabled': 'true'}) }}
select id from (select explode(sequence(1, {{ var('n', 3) }})) as id) s
{% if is_incremental() %}
where id > (select coalesce(max(id), 0) from {{ this }})
{% endif %}
"""


class TestServerLostAfterTheCommit:
    """The Connect server is killed after our commit landed and started again on its port:
    the fence opens a new session, reads the log, and reports the commit (issue 26, 2b/2c).
    Its own server: killing the run's shared one would take every later test's clients."""

    @pytest.fixture(scope="class")
    def own_server(self, tmp_path_factory, jars_cache):
        from tests.conftest import TEST_CONF
        from tests.harness import servers

        server = servers.start(
            "connect", str(tmp_path_factory.mktemp("lost")), jars_cache, extra_conf=TEST_CONF
        )
        yield server
        server.stop()

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, own_server):
        return own_server.profile()

    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": WATERMARK}

    def fresh(self, project, own_server):
        client = own_server.client()
        table = f"{project.test_schema}.events"
        client.sql(f"drop table if exists {table}")
        run_dbt(["run", "--vars", json.dumps({"n": 3})])
        return client, table

    def test_killed_before_verification_the_commit_is_verified_on_a_new_session(
        self, project, own_server, monkeypatch
    ):
        from dbt.adapters.fenced_spark.fence.protocol import Fence

        client, table = self.fresh(project, own_server)
        verify = Fence.verify
        killed = []

        def kill_then_verify(fence, state, conflict, *args):
            if not killed:  # the write statement has returned: its commit is in the log
                killed.append(own_server.process.pid)
                own_server.kill_and_restart()
            return verify(fence, state, conflict, *args)

        monkeypatch.setattr(Fence, "verify", kill_then_verify)
        results, output = run_dbt_and_capture(["run", "--vars", json.dumps({"n": 6})])

        assert killed and own_server.process.pid != killed[0]  # the server really restarted
        client = own_server.client()  # the old client's session went with the server
        (write,) = ours(history(client, table))
        assert "reading it again on a new connection" in output
        assert f"read v{write.read_version} -> committed v{write.version}" in output
        assert results.results[0].adapter_response["commit_version"] == write.version
        assert rows(client, f"select id from {table} order by id") == [(i,) for i in range(1, 7)]

    def test_killed_during_the_statement_after_its_commit_is_reported_committed(
        self, project, own_server
    ):
        client, table = self.fresh(project, own_server)
        location = client.sql(f"describe detail {table}").collect()[0]["location"]
        log = os.path.join(location.removeprefix("file:"), "_delta_log")
        landed = os.path.join(log, f"{1:020d}.json")  # the fenced append's commit
        killed = []

        def kill_once_it_lands():
            # Delta writes N.json, then its post-commit work (a checkpoint after every
            # commit and a symlink manifest here, each a Spark job) before the statement
            # answers: the kill falls in between.
            deadline = time.monotonic() + 300
            while not os.path.exists(landed) and time.monotonic() < deadline:
                time.sleep(0.005)
            if os.path.exists(landed):
                killed.append(own_server.process.pid)
                own_server.kill_and_restart()

        watcher = threading.Thread(target=kill_once_it_lands)
        watcher.start()
        results, output = run_dbt_and_capture(
            ["run", "--vars", json.dumps({"n": 6})], expect_pass=False
        )
        watcher.join()

        assert killed and own_server.process.pid != killed[0]
        client = own_server.client()
        (write,) = ours(history(client, table))
        assert write.version == 1
        message = results.results[0].message
        assert f"the write committed as v{write.version} (verified: based on v0)" in message
        assert "then the statement failed" in message
        assert f"committed as v{write.version}; it stands" in message
        assert rows(client, f"select id from {table} order by id") == [(i,) for i in range(1, 7)]
        # The plain re-run the message allows adds nothing: the batch is not applied twice.
        run_dbt(["run", "--vars", json.dumps({"n": 6})])
        assert rows(client, f"select id from {table} order by id") == [(i,) for i in range(1, 7)]

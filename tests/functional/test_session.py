"""The embedded session: delta by default, isolated connections, dbt debug."""

import os
import re

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture

from dbt.adapters.fenced_spark.handles import SessionHandle
from tests.functional.lakehouse import rows


class TestDeltaIsTheDefault:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "plain_table.sql": "{{ config(materialized='table') }} select 1 as id",
            "plain_incremental.sql": "{{ config(materialized='incremental') }} select 1 as id",
        }

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"plain_seed.csv": "id\n1\n"}

    def test_every_materialization_writes_delta(self, project, spark):
        run_dbt(["seed"])
        run_dbt(["run"])
        for name in ("plain_table", "plain_incremental", "plain_seed"):
            detail = spark.sql(f"describe detail {project.test_schema}.{name}").collect()[0]
            assert detail.format == "delta", name


class TestConnectionsAreIsolated:
    def test_confs_and_temp_views_stay_in_their_connection(self, project):
        adapter = project.adapter
        with adapter.connection_named("first"):
            adapter.execute("SET spark.databricks.delta.commitInfo.userMetadata=mine")
            adapter.execute("create temporary view only_here as select 1 as id")
            first = adapter.connections.get_thread_connection().handle
        with adapter.connection_named("second"):
            _, table = adapter.execute(
                "SET spark.databricks.delta.commitInfo.userMetadata", fetch=True
            )
            assert table.rows[0][1] in ("<undefined>", None, "")
            _, views = adapter.execute("show views like 'only_here'", fetch=True)
            assert len(views.rows) == 0
            second = adapter.connections.get_thread_connection().handle
        if isinstance(first.handle, SessionHandle):  # over thrift, each is a server session
            assert first.handle.spark is not second.handle.spark


class TestDebug:
    def test_dbt_debug_reports_spark_and_delta(self, project, dbt_profile_target):
        _, output = run_dbt_and_capture(["debug"])
        assert "All checks passed" in output
        assert "Spark 4.1" in output and "Delta Lake 4." in output
        if dbt_profile_target["method"] == "session":  # a server's jars are its own
            found = re.search(r"Delta's jars: (\d+) jars, \d+ MB, in (\S+)", output)
            assert found and int(found.group(1)) > 1
            assert any(name.startswith("io.delta_delta-spark") for name in os.listdir(found[2]))


class TestReplaceWhereRowsOutsideThePredicate:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "outside.sql": """
{{ config(materialized='incremental', incremental_strategy='replace_where',
          incremental_predicates=["day >= 2"]) }}
select cast(id as int) as day from range(0, 4)
{% if is_incremental() %} where id >= {{ var('from', 2) }} {% endif %}
"""
        }

    def test_refused_by_delta_with_the_model_named_and_nothing_written(self, project, spark):
        run_dbt(["run"])
        table = f"{project.test_schema}.outside"
        before = len(spark.sql(f"describe history {table}").collect())
        results = run_dbt(["run", "--vars", "{from: 1}"], expect_pass=False)
        message = results.results[0].message
        assert "model.test.outside" in message and "nothing was written" in message
        assert "DELTA_REPLACE_WHERE_MISMATCH" in message
        assert len(spark.sql(f"describe history {table}").collect()) == before
        assert rows(spark, f"select day from {table} order by day") == [(0,), (1,), (2,), (3,)]


HOLDER = """
import sys, time
from dbt.adapters.fenced_spark import lakehouse
lakehouse.hold_folder(sys.argv[1], 0)
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_dbt_process_on_the_folder_is_told_who_holds_it(tmp_path):
    """Before any JVM starts: the folder's embedded Derby would refuse the second process only
    after 40 s, inside Hive, without saying who holds it."""
    import subprocess
    import sys

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.sql").write_text("select 1 as id")
    (tmp_path / "dbt_project.yml").write_text("name: held\nversion: '1.0'\nprofile: held\n")
    folder = tmp_path / "lake"
    (tmp_path / "profiles.yml").write_text(
        "held:\n  target: dev\n  outputs:\n    dev:\n      type: fenced_spark\n"
        f"      schema: held\n      folder: {folder}\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        dbt = os.path.join(os.path.dirname(sys.executable), "dbt")
        done = subprocess.run(
            [dbt, "run", "--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode != 0
    said = done.stdout
    assert f"The embedded lakehouse in {folder} is in use by pid {holder.pid} on " in said
    assert "`folder_wait: <seconds>`" in said
    assert said.count("Runtime Error") == 1, said
    # Told before any JVM started: none opened the folder's metastore or wrote Spark's log.
    assert not os.path.exists(folder / "metastore_db")
    assert not os.path.exists(folder / "logs" / "spark.log")

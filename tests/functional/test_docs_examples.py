"""The docs' examples run. A code block under `<!-- example: <project>/<path> -->` in the README
or docs/ is written verbatim to `<path>` of a small project of that name and built on real
Spark + Delta, so a docs change that breaks an example fails here. The upstream seeds and
sources an example refers to are given below; the README's quick start is built whole, as a
new user would: its own files, in a new directory, by the `dbt` command."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import REPO
from tests.functional.lakehouse import rows

PAGES = [Path(REPO) / "README.md", *sorted((Path(REPO) / "docs").glob("*.md"))]
README = PAGES[0].read_text()
MARK = re.compile(r"^<!-- example: ([\w-]+)/(\S+) -->\n```[\w-]*\n(.*?)^```\n", re.M | re.S)


def examples() -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for page in PAGES:
        for project, path, text in MARK.findall(page.read_text()):
            assert path not in found.get(project, {}), f"{page.name}: {project}/{path} twice"
            found.setdefault(project, {})[path] = text
    return found


EXAMPLES = examples()


def files(project: str, folder: str) -> dict[str, str]:
    return {
        path.removeprefix(f"{folder}/"): text
        for path, text in EXAMPLES[project].items()
        if path.startswith(f"{folder}/")
    }


def test_the_pages_mark_their_examples():
    # `shared` is run by tests/twodrivers (a real HDFS and a shared metastore): `make twodrivers`.
    assert set(EXAMPLES) == {"quickstart", "readme", "strategies", "shared", "refused"}
    assert len(EXAMPLES["strategies"]) == 12 and len(EXAMPLES["quickstart"]) == 4


RAW_ORDERS = """order_id,status,amount,updated_at
1,open,100,2026-01-01 08:00:00
2,open,250,2026-01-01 09:30:00
"""
RAW_EVENTS = """event_id,order_id,event_type,event_ts
1,1,placed,2026-01-01 08:00:00
2,2,placed,2026-01-01 09:30:00
3,1,shipped,2026-01-02 10:00:00
"""


def built(results) -> None:
    failed = [(r.node.name, r.message) for r in results.results if str(r.status) != "success"]
    assert not failed and results.results


@pytest.mark.skip_profile("thrift", "connect", reason="the examples' profile is the session")
class TestStrategiesPage:
    """docs/strategies.md: every strategy's model, the snapshot, compile-time reads and
    writes, the pre-hook reload; built twice, so that every incremental one runs fenced."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {
            "raw_orders.csv": RAW_ORDERS,
            "raw_events.csv": RAW_EVENTS,
            "landing_batch.csv": "id,payload\n1,a\n2,b\n",
            "landing.csv": "id,payload\n1,a\n2,b\n3,c\n4,d\n5,e\n",
            "daily_source.csv": "event_date,event_type,events\n2026-01-01,placed,2\n",
        }

    @pytest.fixture(scope="class")
    def models(self):
        return files("strategies", "models")

    @pytest.fixture(scope="class")
    def snapshots(self):
        return files("strategies", "snapshots")

    def test_every_example_builds_and_runs_again(self, project, spark):
        spark.sql("drop table if exists snapshots.orders_snapshot")  # the page's own schema
        # The microbatch model's window, as the page runs it; 2026-01-01 to today otherwise.
        build = ["build", "--event-time-start", "2026-01-01", "--event-time-end", "2026-01-03"]
        built(run_dbt(build))
        again = run_dbt(build)
        built(again)
        fenced = {
            r.node.name: r.adapter_response.get("fence_outcome")
            for r in again.results
            if r.adapter_response.get("fence_outcome")
        }
        # On the second build each fenced model and the snapshot ran through the fence.
        assert set(fenced) >= {
            "orders",
            "order_events",
            "order_inserts",
            "landing_appends",
            "daily_order_events",
            "compile_time_watermark",
            "reprocessed",
            "daily_reload",
            "orders_snapshot",
            "python_appends",
        }, fenced
        spark.sql("drop table if exists snapshots.orders_snapshot")


@pytest.mark.skip_profile("thrift", "connect", reason="the examples' profile is the session")
class TestReadmeExamples:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"raw_orders.csv": RAW_ORDERS, "raw_events.csv": RAW_EVENTS}

    @pytest.fixture(scope="class")
    def models(self):
        return files("readme", "models")

    @pytest.fixture(scope="class")
    def snapshots(self):
        return files("readme", "snapshots")

    def test_the_snapshot_and_the_batch_example_run_as_the_readme_says(self, project, spark):
        spark.sql("drop table if exists snapshots.orders_snapshot")
        # The source the README's sources.yml names, where the raw events land.
        spark.sql("create schema if not exists raw")
        spark.sql("create or replace table raw.page_views (ds string, url string) using delta")
        spark.sql("insert into raw.page_views values ('2026-01-01', '/a'), ('2026-01-02', '/b')")
        spark.sql("insert into raw.page_views values ('2026-01-02', '/c')")
        run_dbt(["seed"])
        built(run_dbt(["snapshot"]))
        built(run_dbt(["snapshot"]))
        day = ["--vars", json.dumps({"ds": "2026-01-02"})]
        first = run_dbt(["run", "--select", "page_views", *day])
        second = run_dbt(["run", "--select", "page_views", *day])
        built(first)
        assert second.results[0].adapter_response["fence_outcome"] == "batch_already_applied"
        table = f"{project.test_schema}.page_views"
        assert rows(spark, f"select count(*) from {table}") == [(2,)]  # the day, once
        spark.sql("drop table if exists snapshots.orders_snapshot")
        spark.sql("drop table raw.page_views")

    def test_the_sql_header_runs_before_every_run_as_the_readme_says(self, project, spark):
        run_dbt(["seed"])
        first = run_dbt(["run", "--select", "orders_local_day"])
        again = run_dbt(["run", "--select", "orders_local_day"])
        built(first)
        assert again.results[0].adapter_response["fence_outcome"] == "committed"
        table = f"{project.test_schema}.orders_local_day"
        assert rows(spark, f"select distinct zone from {table}") == [("Asia/Kolkata",)]
        assert rows(spark, "select current_timezone()") != [("Asia/Kolkata",)]  # not ours

    def test_the_python_model_runs_fenced_as_the_readme_says(self, project, spark):
        run_dbt(["seed"])
        built(run_dbt(["run", "--select", "order_activity"]))
        spark.sql(
            f"insert into {project.test_schema}.raw_events values "
            "(4, 2, 'shipped', timestamp'2026-01-03 09:00:00')"
        )
        again = run_dbt(["run", "--select", "order_activity"])
        response = again.results[0].adapter_response
        assert (response["read_version"], response["commit_version"]) == (0, 1)
        assert response["fence_outcome"] == "committed"
        table = f"{project.test_schema}.order_activity"
        assert rows(spark, f"select order_id, events from {table} order by order_id") == [
            (1, 2),
            (2, 2),
        ]


class TestDescribeHistoryFromTheProject:
    """The README's `dbt show` of a table's history (every version, each column whole), on the
    quick start's model; on any profile (`--profile thrift` runs it over a server)."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"raw_orders.csv": RAW_ORDERS}

    @pytest.fixture(scope="class")
    def models(self):
        return files("quickstart", "models")

    def test_describe_history_as_the_readme_says(self, project, spark):
        [command] = re.findall(r'`(dbt show --inline "describe history [^`]+)`', README)
        args = shlex.split(command.replace("analytics.orders", f"{project.test_schema}.orders"))
        run_dbt(["seed"])
        built(run_dbt(["run"]))
        spark.sql(
            f"insert into {project.test_schema}.raw_orders "
            "values (3, 'open', 75, timestamp'2026-01-02 10:00:00')"
        )
        built(run_dbt(["run"]))  # fenced: its commit carries the tag
        [shown] = run_dbt(args[1:]).results
        history = [row.dict() for row in shown.agate_table.rows]
        assert [h["version"] for h in history] == [1, 0]
        assert json.loads(history[0]["userMetadata"])["node"] == "model.test.orders"


class TestRefusedExamples:
    """The docs' examples of configs the adapter refuses (docs/configs.md): each model fails
    before any SQL, naming its key, and no table is built."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders_source.csv": "id,status\n1,open\n"}

    @pytest.fixture(scope="class")
    def models(self):
        return files("refused", "models")

    def test_each_refused_example_fails_naming_its_key(self, project, spark):
        run_dbt(["seed"])
        results = run_dbt(["run"], expect_pass=False).results
        assert sorted(r.node.name for r in results) == sorted(
            Path(p).stem for p in EXAMPLES["refused"]
        )
        for result in results:
            assert str(result.status) == "error" and "is not supported yet" in result.message
            assert not spark.sql(
                f"show tables in {project.test_schema} like '{result.node.name}'"
            ).collect()


QUICK_START = re.compile(r"^```bash\n(dbt debug.*?)^```\n", re.M | re.S)


@pytest.mark.skip_profile("thrift", "connect", reason="the quick start's profile is the session")
def test_the_quick_start_builds_in_a_new_directory(tmp_path, jars_cache):
    """The README's four files and its commands, in order, run by the `dbt` command in a new
    directory (a JVM of its own, on a warehouse of its own: nothing shared with this process
    but the jars)."""
    for path, text in EXAMPLES["quickstart"].items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    [block] = QUICK_START.findall(README)
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert [c.split()[:2] for c in commands] == [
        ["dbt", "debug"],
        ["dbt", "build"],
        ["echo", commands[2].split()[1]],
        ["dbt", "build"],
    ]
    # A new user's shell: no dbt setting of this suite's, only its jars (no download).
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBT_")}
    env["DBT_FENCED_SPARK_JARS_CACHE"] = jars_cache
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    outputs = []
    for command in commands:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
        outputs.append(done.stdout)
    assert "All checks passed" in outputs[0] and "Delta's jars: " in outputs[0]
    line = "fenced merge into analytics.orders: read v0 -> committed v1"
    assert line in outputs[3]
    assert line in README  # the line the README shows

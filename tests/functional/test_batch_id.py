"""`fence_batch_id`: a batch is applied once. A re-run of a batch the table already holds writes
nothing and says so (after a crash or a lost server left the outcome unknown, or a scheduler
that fired twice); a run racing another run of its batch is refused by it."""

import json
import os
import signal
import sys

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.fence.delta.words import USER_METADATA
from dbt.adapters.fenced_spark.fence.state import set_conf_sql
from tests.functional.lakehouse import ForeignAt, history, ours, rows
from tests.functional.test_crash import run_child, write_child_project

# A blind append: it reads nothing of its table, so dbt-spark (and the fence without a batch
# id) would append a batch as often as it runs.
EVENTS = """
{{ config(materialized='incremental', incremental_strategy='append',
          fence_batch_id=var('ds'), fence_retries=2) }}
select '{{ var("ds") }}' as ds, id from range(3)
"""

ALREADY = "batch_already_applied"


# Deletes its batch at compile time, then appends it: a re-run of an applied batch must not
# even delete.
REPROCESSED = """
{{ config(materialized='incremental', incremental_strategy='append', fence_batch_id=var('ds')) }}
{% if execute and is_incremental() %}
  {% do run_query("delete from " ~ this ~ " where ds = '" ~ var('ds') ~ "'") %}
{% endif %}
select '{{ var("ds") }}' as ds, id from range(3)
"""


# A merge without unique_key inserts every row, as an append does.
KEYLESS = """
{{ config(materialized='incremental', incremental_strategy='merge', fence_batch_id=var('ds')) }}
select '{{ var("ds") }}' as ds, id from range(3)
"""


# --empty reads its refs as empty: such a run writes none of its batch.
EMPTIED = """
{{ config(materialized='incremental', incremental_strategy='append', fence_batch_id=var('ds')) }}
select '{{ var("ds") }}' as ds, id from {{ ref('numbers') }}
"""


def run(ds: str, expect_pass: bool = True, model: str = "events", *flags: str):
    args = ["run", "--select", model, "--vars", json.dumps({"ds": ds}), *flags]
    return run_dbt(args, expect_pass=expect_pass)


def node(results, model: str = "events"):
    return next(r for r in results.results if r.node.name == model)


def last_run_log(logs_dir) -> str:
    with open(os.path.join(logs_dir, "dbt.log")) as log:
        return log.read().rsplit("running dbt with arguments", 1)[-1]


def batches(spark, table: str) -> list[tuple]:
    return rows(spark, f"select ds, count(*) from {table} group by ds order by ds")


class TestBatchAppliedOnce:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "events.sql": EVENTS,
            "reprocessed.sql": REPROCESSED,
            "keyless.sql": KEYLESS,
            "numbers.sql": "{{ config(materialized='table') }} select id from range(3)",
            "emptied.sql": EMPTIED,
        }

    @pytest.fixture(scope="class")
    def project_config_update(self):
        # Hooks write another table: a skipped batch runs none of them.
        return {
            "models": {
                "+pre-hook": "insert into {{ target.schema }}.audit values ('{{ var(\"ds\") }}')"
            }
        }

    @pytest.fixture
    def audit(self, project, spark) -> str:
        spark.sql(f"create table if not exists {project.test_schema}.audit (ds string) using delta")
        return f"{project.test_schema}.audit"

    def test_a_batch_in_the_table_is_not_applied_again(self, project, spark, logs_dir, audit):
        schema = project.test_schema
        table = f"{schema}.events"

        first = node(run("2026-01-01"))  # the first run builds the table from its batch
        created = history(spark, table)
        assert created[-1].tag["batch"] == "2026-01-01"
        assert created[-1].operation.startswith("CREATE")

        again = node(run("2026-01-01"))
        assert again.adapter_response["fence_outcome"] == ALREADY
        assert again.adapter_response["commit_version"] == created[-1].version
        assert history(spark, table) == created  # nothing committed
        assert batches(spark, table) == [("2026-01-01", 3)]
        with open(os.path.join(logs_dir, "dbt.log")) as log:
            text = log.read()
        assert (
            f"batch '2026-01-01' is already in the table: v{created[-1].version} "
            f"{created[-1].operation} by dbt-fenced-spark model.test.events "
            f"(invocation {created[-1].tag['invocation_id']})"
        ) in text
        assert first.adapter_response.get("fence_outcome") is None  # dbt-spark built it

        second = node(run("2026-01-02"))
        assert second.adapter_response["fence_outcome"] == "committed"
        v2 = second.adapter_response["commit_version"]
        assert ours(history(spark, table))[-1].tag["batch"] == "2026-01-02"

        # A backfill of an older batch finds it too.
        assert node(run("2026-01-01")).adapter_response["fence_outcome"] == ALREADY
        assert batches(spark, table) == [("2026-01-01", 3), ("2026-01-02", 3)]

        # A RESTORE that undid a batch lets it be applied again.
        spark.sql(f"restore table {table} to version as of {v2 - 1}")
        again = node(run("2026-01-02"))
        assert again.adapter_response["fence_outcome"] == "committed"
        assert batches(spark, table) == [("2026-01-01", 3), ("2026-01-02", 3)]
        # The pre-hook ran for each batch applied, never for a skipped one.
        assert rows(spark, f"select ds from {audit} order by ds") == [
            ("2026-01-01",),
            ("2026-01-02",),
            ("2026-01-02",),
        ]

    def test_a_run_of_the_same_batch_that_committed_meanwhile_refuses_this_one(
        self, project, spark, monkeypatch, audit
    ):
        """A double-fired job: another run of the batch commits after this run read vB."""
        table = f"{project.test_schema}.events"
        run_dbt(
            ["run", "-s", "events", "--full-refresh", "--vars", json.dumps({"ds": "2026-02-01"})]
        )
        vb = history(spark, table)[-1].version
        twin = {
            "dbt_fenced_spark": 1,
            "invocation_id": "the-other-run",
            "node": "model.test.events",
            "strategy": "append",
            "read_version": vb,
            "step": "write",
            "expected_version": vb,
            "batch": "2026-02-02",
        }
        writer = ForeignAt(
            monkeypatch,
            spark,
            "vb",
            [
                set_conf_sql(USER_METADATA, json.dumps(twin)),
                f"insert into {table} select '2026-02-02', id from range(3)",
            ],
        )
        refused = node(run("2026-02-02", expect_pass=False))
        assert writer.fired >= 1
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.version, e.tag and e.tag["invocation_id"]) for e in after] == [
            (vb + 1, "the-other-run")
        ]
        message = refused.message
        assert "it applied this model's batch '2026-02-02' (fence_batch_id) too" in message
        assert "never written" in message
        assert "not retried (fence_retries: 2)" in message
        assert batches(spark, table) == [("2026-02-01", 3), ("2026-02-02", 3)]

        # Re-run, as the message says: the batch is in the table.
        rerun = node(run("2026-02-02"))
        assert rerun.adapter_response["fence_outcome"] == ALREADY
        assert rerun.adapter_response["commit_version"] == vb + 1
        assert history(spark, table)[-1].version == vb + 1

    def test_a_compile_time_write_of_an_applied_batch_is_not_sent(
        self, project, spark, audit, logs_dir
    ):
        table = f"{project.test_schema}.reprocessed"
        run("2026-04-01", model="reprocessed")
        applied = node(run("2026-04-02", model="reprocessed"), "reprocessed")
        assert applied.adapter_response["fence_outcome"] == "committed"
        delete = f"delete from {table} where ds = '2026-04-02'"
        assert delete in last_run_log(logs_dir)  # the compile-time step was sent
        before = history(spark, table)

        again = node(run("2026-04-02", model="reprocessed"), "reprocessed")
        assert again.adapter_response["fence_outcome"] == ALREADY
        assert again.adapter_response["commit_version"] == before[-1].version
        assert delete not in last_run_log(logs_dir)
        assert history(spark, table) == before
        assert batches(spark, table) == [("2026-04-01", 3), ("2026-04-02", 3)]

    def test_a_merge_without_unique_key_applies_each_batch_once(self, project, spark, audit):
        table = f"{project.test_schema}.keyless"
        run("2026-05-01", True, "keyless")
        applied = node(run("2026-05-02", True, "keyless"), "keyless")
        assert applied.adapter_response["fence_outcome"] == "committed"
        again = node(run("2026-05-02", True, "keyless"), "keyless")
        assert again.adapter_response["fence_outcome"] == ALREADY
        assert batches(spark, table) == [("2026-05-01", 3), ("2026-05-02", 3)]

    def test_an_empty_run_does_not_stand_for_its_batch(self, project, spark, audit):
        table = f"{project.test_schema}.emptied"
        run("2026-06-01", True, "numbers")
        run("2026-06-01", True, "emptied", "--empty")
        assert batches(spark, table) == []
        assert all(e.tag is None or "batch" not in e.tag for e in history(spark, table))
        node(run("2026-06-01", True, "emptied"), "emptied")
        assert batches(spark, table) == [("2026-06-01", 3)]

    def test_a_batch_whose_rows_were_deleted_is_neither_skipped_nor_applied(
        self, project, spark, audit
    ):
        table = f"{project.test_schema}.keyless"
        run("2026-07-01", True, "keyless")
        spark.sql(f"delete from {table} where ds = '2026-07-01' and id = 0")
        before = history(spark, table)
        failed = node(run("2026-07-01", False, "keyless"), "keyless")
        deleted = before[-1]
        assert deleted.operation == "DELETE" and deleted.tag is None
        assert f"and v{deleted.version} DELETE by " in failed.message
        assert (
            "removed rows of a file the batch wrote: the fence cannot tell whether the batch is "
            "still whole in the table, so it neither applies the batch again nor skips it"
        ) in failed.message
        assert history(spark, table) == before
        # As the message says: another id applies it again.
        run("2026-07-01-again", True, "keyless")
        assert ("2026-07-01-again", 3) in batches(spark, table)


CHILD_EVENTS = """
{{ config(materialized='incremental', incremental_strategy='append', fence_batch_id=var('ds')) }}
select '{{ var("ds") }}' as ds, id from range(3)
"""


@pytest.mark.skip_profile("thrift", reason="kills the process that runs the embedded JVM")
@pytest.mark.skip_profile("connect", reason="kills the process that runs the embedded JVM")
class TestKilledAfterItsCommit:
    @pytest.fixture(scope="class")
    def models(self):
        return {"events.sql": CHILD_EVENTS}

    def test_the_rerun_of_a_batch_whose_run_died_after_its_commit_writes_nothing(
        self, project, spark, tmp_path, jars_cache
    ):
        schema = project.test_schema
        table = f"{schema}.events"
        location = str(tmp_path / "events_delta")
        spark.sql(f"create table {table} (ds string, id bigint) using delta location '{location}'")
        root = tmp_path / "child"
        write_child_project(root, tmp_path / "lh", jars_cache, {"events": CHILD_EVENTS})
        args = ["run", "--vars", json.dumps({"ds": "2026-03-01"})]
        code, steps, output = run_child(
            [
                sys.executable,
                "-m",
                "tests.functional.crash_child",
                str(root),
                str(tmp_path / "lh"),
                "analytics.events",
                location,
                "plain",
                "verify",
                "-1",
                json.dumps(args),
            ]
        )
        # Killed as verification began: the write committed, and no one said so.
        assert code == -signal.SIGKILL and steps[-1] == "verify", output
        written = ours(history(spark, table))
        assert [e.tag["batch"] for e in written] == ["2026-03-01"]
        assert batches(spark, table) == [("2026-03-01", 3)]

        rerun = node(run("2026-03-01"))
        assert rerun.adapter_response["fence_outcome"] == ALREADY
        assert rerun.adapter_response["commit_version"] == written[-1].version
        assert batches(spark, table) == [("2026-03-01", 3)]
        assert history(spark, table)[-1].version == written[-1].version

"""The fence over a Spark Thrift Server or Spark Connect server, raced by other clients of the
same server.

Every fence step is plain SQL, so `method: thrift` and `method: connect` get the same
guarantees as the embedded session. The foreign writers here are what a shared lakehouse
has: a notebook's SQL client, and a second `dbt run` of the same project.
"""

import json
import subprocess

import pytest
from dbt.tests.util import run_dbt

from dbt.adapters.fenced_spark.impl import FencedSparkAdapter
from tests.functional.lakehouse import (
    ForeignWriter,
    OrdersTable,
    dbt_process,
    history,
    ours,
    process_output,
    rows,
)

pytestmark = pytest.mark.skip_profile(
    "session", reason="these races need a server: run with --profile thrift or connect"
)

# The pre-hook runs after the fence captured vB and before the write: the race-b window.
# `hold_ms` keeps a run inside that window while another run enters it.
ORDERS = """
{{ config(
    materialized='incremental',
    incremental_strategy='merge',
    unique_key='id',
    pre_hook=["select 'race window', reflect('java.lang.Thread', 'sleep', cast("
              ~ var('hold_ms', 0) ~ " as bigint))"],
) }}
select id, status from values {{ var('batch', "(1, 'open'), (2, 'open')") }} as b(id, status)
"""

RACE_WINDOW = "'race window'"


class ThriftRaceBase(OrdersTable):
    ORDERS = ORDERS


class TestNotebookClientRacesTheMerge(ThriftRaceBase):
    """Race (b): another client of the same server commits between vB and our MERGE."""

    def test_foreign_client_commit_after_vb_is_refused(self, project, spark, table, monkeypatch):
        notebook = ForeignWriter(spark)  # its own connection to the server
        assert notebook.session is not spark
        cancel = f"update {table} set status = 'cancelled' where id = 1"
        execute = FencedSparkAdapter.execute

        def execute_racing(self, sql, *args, **kwargs):
            if RACE_WINDOW in sql:
                notebook.sql(cancel)
            return execute(self, sql, *args, **kwargs)

        monkeypatch.setattr(FencedSparkAdapter, "execute", execute_racing)
        vb = history(spark, table)[-1].version

        results = run_dbt(
            ["run", "--vars", json.dumps({"batch": "(1, 'shipped'), (3, 'open')"})],
            expect_pass=False,
        )

        after = [e for e in history(spark, table) if e.version > vb]
        assert [e.operation for e in after] == ["UPDATE"]  # the notebook's, after vB
        assert after[0].version == vb + 1 and after[0].tag is None
        message = results.results[0].message
        assert "refused" in message and f"version {vb}" in message
        assert f"v{vb + 1} UPDATE" in message and "never written" in message
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, "cancelled"),
            (2, "open"),
        ]


class TestTwoDbtRunsAtOnce(ThriftRaceBase):
    """Two `dbt run` processes of one project, one server, one table, at the same moment."""

    def dbt_run(self, project, name: str, batch: str) -> subprocess.Popen:
        return dbt_process(project, name, {"batch": batch, "hold_ms": 10000})

    def output(self, project, name: str) -> str:
        return process_output(project, name)

    def test_one_wins_the_other_fails_loudly_and_nothing_is_lost(self, project, spark, table):
        vb = history(spark, table)[-1].version
        batches = {"a": "(1, 'shipped'), (3, 'open')", "b": "(1, 'returned'), (4, 'open')"}
        runs = {name: self.dbt_run(project, name, batch) for name, batch in batches.items()}
        codes = {name: run.wait(timeout=600) for name, run in runs.items()}
        # Both outputs in full in a failure's message: a race to read from them.
        outputs = {n: self.output(project, n) for n in runs}

        assert sorted(codes.values()) == [0, 1], outputs
        winner = next(name for name, code in codes.items() if code == 0)
        loser = next(name for name, code in codes.items() if code != 0)
        after = [e for e in history(spark, table) if e.version > vb]
        merges = ours(after)
        # Both runs read vB: the winner's MERGE read it, and the loser was refused on it.
        assert merges[0].read_version == vb
        loser_output = outputs[loser]
        assert "refused" in loser_output and f"version {vb}" in loser_output, outputs
        kept = [e for e in after if e.operation != "RESTORE"]
        # Nothing of the loser's remains: either never written, or written and reverted.
        if any(e.operation == "RESTORE" for e in after):
            assert "reverted" in loser_output, outputs
            assert history(spark, table)[-1].operation == "RESTORE"
        else:
            assert "never written" in loser_output, outputs
            assert [e.operation for e in kept] == ["MERGE"], outputs
        winner_id = 3 if winner == "a" else 4
        winner_status = "shipped" if winner == "a" else "returned"
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, winner_status),
            (2, "open"),
            (winner_id, "open"),
        ]

        # The loser re-runs on the winner's state: both batches are there, in serial order.
        rerun = self.dbt_run(project, f"{loser}_again", batches[loser])
        assert rerun.wait(timeout=600) == 0, self.output(project, f"{loser}_again")
        loser_status = "shipped" if loser == "a" else "returned"
        assert rows(spark, f"select id, status from {table} order by id") == [
            (1, loser_status),
            (2, "open"),
            (3, "open"),
            (4, "open"),
        ]

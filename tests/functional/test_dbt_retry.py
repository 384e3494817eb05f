"""`dbt retry` after the fence refused: it runs again what failed, from the version that stands.

The same on dbt 1.11 and 1.12 (1.12 retries a microbatch model's batches with the original
invocation's time): the refused model, or only its refused batch, runs again, reads the foreign
commit the fence would not overwrite, and commits on top of it.
"""

import json

import pytest
from dbt.tests.util import run_dbt

from tests.functional.lakehouse import ForeignAt, history, ours, response_of, rows

MERGED = """
{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id') }}
select id, {{ var('round', 0) }} as round from range(0, 3)
"""

RAW_EVENTS = """
{{ config(materialized='table', event_time='event_ts') }}
select id, cast(date_add(date'2026-01-01', cast(id % 3 as int)) as timestamp) as event_ts
from range(0, 9)
"""

BATCHED = """
{{ config(materialized='incremental', incremental_strategy='microbatch',
          event_time='event_ts', batch_size='day', begin='2026-01-01') }}
select id, event_ts, {{ var('round', 0) }} as round from {{ ref('raw_events') }}
"""

THREE_DAYS = ("--event-time-start", "2026-01-01", "--event-time-end", "2026-01-04")


class TestRetryAfterARefusal:
    @pytest.fixture(scope="class")
    def models(self):
        return {"merged.sql": MERGED, "raw_events.sql": RAW_EVENTS, "batched.sql": BATCHED}

    def test_retry_merges_on_top_of_the_refused_commit(self, project, spark, monkeypatch):
        run_dbt(["run", "--select", "merged"])
        table = f"{project.test_schema}.merged"
        vb = history(spark, table)[-1].version
        writer = ForeignAt(monkeypatch, spark, "vb", f"update {table} set round = 9 where id = 1")
        run_dbt(["run", "--select", "merged", "--vars", json.dumps({"round": 1})], False)
        assert writer.fired == 1
        foreign = history(spark, table)[-1]
        assert (foreign.version, foreign.operation, foreign.tag) == (vb + 1, "UPDATE", None)
        assert rows(spark, f"select id, round from {table} order by id") == [
            (0, 0),
            (1, 9),
            (2, 0),
        ]

        monkeypatch.undo()
        run_dbt(["retry"])  # the refused invocation's vars: round 1

        (retried,) = [e for e in history(spark, table) if e.version > foreign.version]
        assert ours([retried]) == [retried] and retried.operation == "MERGE"
        assert retried.tag["read_version"] == foreign.version  # read theirs, then wrote
        assert rows(spark, f"select id, round from {table} order by id") == [
            (0, 1),
            (1, 1),
            (2, 1),
        ]

    def test_retry_runs_only_the_refused_batch(self, project, spark, monkeypatch):
        run_dbt(["run", "--full-refresh", "--select", "+batched", *THREE_DAYS])
        table = f"{project.test_schema}.batched"
        vb = history(spark, table)[-1].version
        # A row in day 2's window, landing right after the second batch captured its vB.
        foreign_row = "insert into {t} values (100, timestamp'2026-01-02 12:00:00', 9)"
        writer = ForeignAt(monkeypatch, spark, "vb", foreign_row.format(t=table), nth=2)
        args = ["run", "--select", "batched", *THREE_DAYS, "--vars", json.dumps({"round": 1})]
        results = run_dbt(args, False)
        assert writer.fired == 2
        batches = results.results[0].batch_results
        assert len(batches.successful) == 2 and len(batches.failed) == 1
        after = [e for e in history(spark, table) if e.version > vb]
        assert [(e.operation, e.tag is None) for e in after] == [
            ("WRITE", False),  # day 1, ours
            ("WRITE", True),  # their row in day 2
            ("WRITE", False),  # day 3, ours; day 2 refused
        ]
        foreign = after[1]
        assert rows(spark, f"select id, round from {table} order by id") == [
            (i, 0 if i % 3 == 1 else 1) for i in range(9)
        ] + [(100, 9)]

        monkeypatch.undo()
        run_dbt(["retry"])

        (retried,) = [e for e in history(spark, table) if e.version > after[-1].version]
        assert ours([retried]) == [retried] and retried.tag["strategy"] == "microbatch"
        assert retried.tag["read_version"] == after[-1].version > foreign.version
        # Day 2's window is the batch's own: replaced, their row in it too, as any re-run does.
        assert rows(spark, f"select id, round from {table} order by id") == [
            (i, 1) for i in range(9)
        ]
        [batch] = response_of(project, "batched")["batches"]
        assert (batch["fence_outcome"], batch["commit_version"]) == ("committed", retried.version)

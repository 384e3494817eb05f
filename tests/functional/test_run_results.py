"""run_results.json as dbt users read it: every incremental write's `rows_affected` (with the
rows inserted, updated and deleted) from its Delta commit, fenced or not, equal to what changed
in the table as the table itself says; and the keys the README lists for a committed write."""

import json

import pytest
from dbt.tests.util import run_dbt

from tests.conftest import SERVERS
from tests.functional.lakehouse import history, response_of, rows

# Every model writes rows (id, v, d) from a var: each test states its batch.
FIRST = "(1, 'a', 1), (2, 'a', 1), (3, 'a', 2), (4, 'a', 2)"


def model(config: str) -> str:
    return (
        f"{{{{ config(materialized='incremental', {config}) }}}}\n"
        f"select id, v, d from values {{{{ var('rows', \"{FIRST}\") }}}} as t(id, v, d)"
    )


EVENTS = """
{{ config(materialized='table', event_time='ts') }}
select id, cast(date_add(date'2026-01-01', cast(id % 3 as int)) as timestamp) as ts,
  {{ var('round', 0) }} as round
from range({{ var('lo', 0) }}, {{ var('hi', 9) }})
"""

BATCHED = """
{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='ts',
          batch_size='day', begin='2026-01-01') }}
select id, ts, round from {{ ref('events') }}
"""

COUNTS = ("rows_affected", "rows_inserted", "rows_updated", "rows_deleted")


def counts(response: dict) -> dict:
    return {k: response[k] for k in COUNTS if k in response}


def change(inserted: int, updated: int, deleted: int | None) -> dict:
    found = {"rows_inserted": inserted, "rows_updated": updated, "rows_deleted": deleted}
    known = {k: v for k, v in found.items() if v is not None}
    return {"rows_affected": sum(known.values()), **known}


def by_key(spark, table: str, version: int | None = None) -> dict:
    at = f" version as of {version}" if version is not None else ""
    return {r[0]: tuple(r[1:]) for r in rows(spark, f"select id, v, d from {table}{at}")}


def key_change(before: dict, after: dict) -> tuple[int, int, int]:
    """What a write did to the table, by key: rows new, changed and gone."""
    inserted = len(after.keys() - before.keys())
    updated = sum(1 for k in after.keys() & before.keys() if after[k] != before[k])
    return inserted, updated, len(before.keys() - after.keys())


class TestRowsAffected:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "merged.sql": model("incremental_strategy='merge', unique_key='id'"),
            "unfenced_merge.sql": model(
                "incremental_strategy='merge', unique_key='id', fenced=false"
            ),
            "inserted.sql": model("incremental_strategy='insert', unique_key='id'"),
            "appended.sql": model("incremental_strategy='append'"),
            "strict.sql": model("incremental_strategy='append_if_unchanged'"),
            "replaced.sql": model(
                "incremental_strategy='replace_where', incremental_predicates=['d = 2']"
            ),
            "overwritten.sql": model("incremental_strategy='insert_overwrite', partition_by='d'"),
            "events.sql": EVENTS,
            "batched.sql": BATCHED,
        }

    def built(self, project, spark, name: str) -> tuple[str, int, dict]:
        """The model's table, built anew by its first run: a CREATE counting its rows."""
        table = f"{project.test_schema}.{name}"
        spark.sql(f"drop table if exists {table}")
        run_dbt(["run", "--select", name])
        first = by_key(spark, table)
        assert counts(response_of(project, name)) == change(len(first), 0, 0)
        return table, history(spark, table)[-1].version, first

    def rerun(self, project, spark, name: str, batch: str) -> dict:
        run_dbt(["run", "--select", name, "--vars", json.dumps({"rows": batch})])
        return response_of(project, name)

    @pytest.mark.parametrize("name", ["merged", "unfenced_merge", "inserted"])
    def test_a_merge_counts_what_it_inserted_and_updated(self, project, spark, name):
        table, vb, before = self.built(project, spark, name)
        # 2 changes, 5 and 6 are new; 1, 3 and 4 are left out of the batch.
        response = self.rerun(project, spark, name, "(2, 'b', 1), (5, 'b', 1), (6, 'b', 2)")
        after = by_key(spark, table)
        inserted, updated, deleted = key_change(before, after)
        assert (inserted, updated, deleted) == ((2, 0, 0) if name == "inserted" else (2, 1, 0))
        assert counts(response) == change(inserted, updated, deleted)
        [write] = [e for e in history(spark, table) if e.version > vb]
        assert write.operation == "MERGE"
        if name == "unfenced_merge":
            assert "fence_outcome" not in response and response["_message"] == "OK"
        else:
            assert response["commit_version"] == write.version

    @pytest.mark.parametrize("name", ["appended", "strict"])
    def test_an_append_counts_the_rows_it_wrote(self, project, spark, name):
        table, vb, before = self.built(project, spark, name)
        response = self.rerun(project, spark, name, "(7, 'c', 1), (8, 'c', 3), (9, 'c', 3)")
        after = by_key(spark, table)
        assert key_change(before, after) == (3, 0, 0)
        assert counts(response) == change(3, 0, 0)
        assert ("fence_outcome" in response) is (name == "strict")

    def test_a_replace_where_counts_the_rows_it_replaced(self, project, spark):
        table, vb, before = self.built(project, spark, "replaced")
        response = self.rerun(
            project, spark, "replaced", "(10, 'r', 2), (11, 'r', 2), (12, 'r', 2)"
        )
        in_range = f"select count(*) from {table} {{}} where d = 2"
        removed = rows(spark, in_range.format(f"version as of {vb}"))[0][0]
        written = rows(spark, in_range.format(""))[0][0]
        assert (removed, written) == (2, 3)
        assert counts(response) == change(written, 0, removed)
        assert by_key(spark, table).keys() - {10, 11, 12} == {1, 2}  # the rest untouched

    def test_an_insert_overwrite_counts_what_it_wrote_and_not_what_delta_does_not_count(
        self, project, spark
    ):
        table, vb, before = self.built(project, spark, "overwritten")
        response = self.rerun(project, spark, "overwritten", "(20, 'o', 2)")
        after = by_key(spark, table)
        # Partition d = 2 replaced: its two rows gone, one written; Delta's metrics count the
        # files it removed, not their rows, so `rows_deleted` is not reported.
        assert key_change(before, after) == (1, 0, 2)
        assert counts(response) == change(1, 0, None)
        assert "fence_outcome" not in response

    def test_a_microbatch_model_counts_each_batch_and_their_sum(self, project, spark):
        table = f"{project.test_schema}.batched"
        spark.sql(f"drop table if exists {table}")
        days = ["--event-time-start", "2026-01-01", "--event-time-end", "2026-01-04"]
        run_dbt(["run", "--select", "events", "batched", *days])
        first = response_of(project, "batched")
        assert [b["rows_inserted"] for b in first["batches"]] == [3, 3, 3]
        assert counts(first) == change(9, 0, 0)
        vb = history(spark, table)[-1].version

        # Days 2 and 3 again, from other rows: each batch replaces its day.
        round_2 = ["--vars", json.dumps({"lo": 3, "hi": 12, "round": 1})]
        run_dbt(["run", "--select", "events", *round_2])
        run_dbt(["run", "--select", "batched", *round_2, *days[:1], "2026-01-02", *days[2:]])
        response = response_of(project, "batched")
        day = "select count(*) from {t} {at} where ts >= '2026-01-0{n}' and ts < '2026-01-0{m}'"
        for batch, n in zip(response["batches"], (2, 3), strict=True):
            removed = rows(spark, day.format(t=table, at=f"version as of {vb}", n=n, m=n + 1))
            written = rows(spark, day.format(t=table, at="", n=n, m=n + 1))
            assert counts(batch) == change(written[0][0], 0, removed[0][0])
            assert batch["fence_outcome"] == "committed"
        assert counts(response) == change(6, 0, 6)

    def test_a_committed_write_has_every_key_the_readme_lists(
        self, project, spark, dbt_profile_name
    ):
        table, vb, _ = self.built(project, spark, "strict")
        response = self.rerun(project, spark, "strict", "(30, 'k', 1)")
        listed = {"read_version", "commit_version", "tolerated", "steps", *COUNTS}
        if dbt_profile_name in SERVERS:
            listed.add("table_location")
        assert listed <= response.keys()
        assert (response["tolerated"], response["steps"]) == ([], [])
        assert (response["read_version"], response["commit_version"]) == (vb, vb + 1)
